"""Batch admission: a round's Fires in one SERIALIZABLE statement, then the rows it left.

``Admission.admit`` runs three phases, in this order, each at most once:

1. **The batch**: every Fire in one statement (one implicit transaction, one round trip,
   one bridge crossing); a serialization failure or deadlock re-sends it while the lease
   has room. Rows whose fence, revisions or specs fail come back with their own outcome.
2. **One by one**, only when the batch hit a constraint or other server error: each Fire
   alone, so one bad row never blocks the others (``StoreFailed`` for that row).
3. **The rows left**, untouched by a statement although their fence, cursor and specs
   hold: held by another session (a batch skips such rows) or not where their locator
   said. First all together at their locators, waiting for the rows (the holder is most
   often another replica's claim statement, which keeps a row it found already taken
   locked until it ends: with many replicas, hundreds of rows a drain); then by key, each
   alone and waiting, those still left or, if that statement could not commit (a
   timeout, retries spent, a server error; never after a lost reply), all of them. A wait
   lasts at most the runtime role's ``lock_timeout``; past it ``RetryExhausted`` with
   SQLSTATE 55P03, not retried.

A lock or statement timeout (55P03, 57014) ends the batch's or a lone row's Fires with
``RetryExhausted`` (it says nothing about one row, and falling back row by row would wait
again per row, past the lease); only the rows left sent together, which already waited
as a group, are then tried alone, as they were before they were sent together. A lost
connection is ``CommitUnknown``, never re-sent.

Authority: the database decides every fence (its WHERE clauses and its clock); this module
only names the part that failed, from what the same statement observed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, assert_never

import msgspec
import trio

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.fence import FireRequest, failed_part
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    CommitUnknown,
    DigestInvalid,
    FenceLost,
    Inactive,
    Outcome,
    OverlapSkipped,
    RetryExhausted,
    RevisionChanged,
    StoreFailed,
)
from qlsched.postgres.claim import LeaseDeadlines, observed_schedule
from qlsched.postgres.errors import ErrorKind, classify, sqlstate
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query

ADMIT_SETTINGS: Final[Mapping[str, str]] = {
    "enable_seqscan": "off",
    "jit": "off",
    "plan_cache_mode": "force_generic_plan",
}
"""Server settings of the admit pool. Every table the admit reads is reached by key or tuple
id: under SERIALIZABLE a sequential scan takes a relation-level SIRead lock that makes every
other replica's admit conflict. Generic plans: a one-row batch was otherwise re-planned at
every call (docs/performance.md, Admit). No JIT, as on the claim pool (``CLAIM_SETTINGS``):
short statements whose costs sequential scans off inflate."""

LOCK_NOT_AVAILABLE: Final = "55P03"
"""SQLSTATE of a lock wait cut by the runtime role's lock_timeout."""
PROBE_BUDGET_S: Final = 2.0
"""After a lost admit reply, the time all the diagnostic look-ups of its keys may take."""
TIMEOUT_CODES: Final[Mapping[str, str]] = {
    LOCK_NOT_AVAILABLE: "admit_lock_timeout",
    "57014": "admit_statement_timeout",
}
"""Diagnostic code of an admit ended by the runtime role's lock or statement timeout."""

SpecRefusal = RevisionChanged | DigestInvalid | Inactive
"""An admit refused by a check that needs no schedule row (the ``specs`` step of admit.sql)."""

REFUSALS: Final[Mapping[tuple[str, str], Callable[[str, str], SpecRefusal]]] = {
    ("inactive", "project_missing"): lambda p, t: Inactive(p, t, reason="project_missing"),
    ("inactive", "project_archived"): lambda p, t: Inactive(p, t, reason="project_archived"),
    ("inactive", "trigger_disabled"): lambda p, t: Inactive(p, t, reason="trigger_disabled"),
    ("revision_changed", "trigger"): lambda p, t: RevisionChanged(p, t, part="trigger"),
    ("revision_changed", "task"): lambda p, t: RevisionChanged(p, t, part="task"),
    ("revision_changed", "execution"): lambda p, t: RevisionChanged(p, t, part="execution"),
    ("digest_invalid", "executor"): lambda p, t: DigestInvalid(p, t, part="executor"),
    ("digest_invalid", "execution"): lambda p, t: DigestInvalid(p, t, part="execution"),
    ("digest_invalid", "task"): lambda p, t: DigestInvalid(p, t, part="task"),
}
"""Every ``(refusal_kind, refusal_part)`` admit.sql returns, to the outcome it names: the
kind is the outcome's tag, the part its ``part`` (or ``reason``)."""


class UnknownRefusal(Exception):
    """admit.sql returned a ``(kind, part)`` that ``REFUSALS`` does not hold: the SQL and
    this module disagree (a bug, never a database state)."""

    def __init__(self, kind: str, part: str) -> None:
        super().__init__(f"unknown admit refusal ({kind!r}, {part!r})")
        self.kind = kind
        self.part = part


class MixedOwners(ValueError):
    """One admit call held Fires claimed by more than one owner: the statement is sent for
    one owner (a replica claims under one), so the caller must split such a batch."""


def decode_refusal(kind: str, part: str, project_id: str, trigger_id: str) -> SpecRefusal:
    """The outcome admit.sql's ``(refusal_kind, refusal_part)`` names.

    Raises:
        UnknownRefusal: the pair is not one the SQL returns.
    """
    make = REFUSALS.get((kind, part))
    if make is None:
        raise UnknownRefusal(kind, part)
    return make(project_id, trigger_id)


def one_owner(fires: Sequence[FireRequest]) -> str:
    """The owner every Fire was claimed by.

    Raises:
        MixedOwners: the Fires were claimed by more than one owner.
    """
    owner = fires[0].claim.fence.owner
    if any(f.claim.fence.owner != owner for f in fires):
        raise MixedOwners("an admit's Fires must all be claimed by one owner")
    return owner


class _Rows(msgspec.Struct, frozen=True):
    """The statement committed: its result rows, one per Fire, in request order."""

    rows: list[Any]


class _Ended(msgspec.Struct, frozen=True):
    """The statement ended its Fires without a row each (retries spent, a timeout, a lost
    connection): one outcome per Fire, no fallback."""

    outcomes: list[Outcome]


class _Failed(msgspec.Struct, frozen=True):
    """A constraint or other server error: nothing was written."""

    sqlstate: str | None
    exception: str


def _by_key(fire: FireRequest) -> FireRequest:
    """The same Fire without its locator: the admit then finds the row by its key."""
    return msgspec.structs.replace(fire, claim=msgspec.structs.replace(fire.claim, locator=None))


def _exhausted(fire: FireRequest, attempts: int, state: str | None) -> Outcome:
    return RetryExhausted(
        fire.claim.project_id, fire.claim.trigger_id, attempts=attempts, sqlstate=state or ""
    )


def _row_outcome(fire: FireRequest, row: Any) -> Outcome | None:
    """One admit result row as its outcome; None: the row was left untouched although its
    fence, cursor and specs hold (held by another session, or not at its locator)."""
    if row["admitted_at_ms"] is not None and row["key_taken"]:
        return AlreadyAdmitted(
            fire.claim.project_id,
            fire.claim.trigger_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=row["admitted_at_ms"],
        )
    if row["admitted_at_ms"] is not None and row["overlap"] == "skip":
        return OverlapSkipped(
            fire.claim.project_id,
            fire.claim.trigger_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            admitted_at_ms=row["admitted_at_ms"],
        )
    if row["admitted_at_ms"] is not None:
        return Admitted(
            fire.claim.project_id,
            fire.claim.trigger_id,
            run_id=fire.run_id,
            attempt_id=fire.attempt_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=row["admitted_at_ms"],
            held=row["overlap"] == "hold",
        )
    claim = fire.claim
    part = failed_part(claim, observed_schedule(row), row["now_ms"], fire.scheduled_for_ms)
    if part is not None:
        return part
    if row["refusal_kind"] is not None:
        return decode_refusal(
            row["refusal_kind"], row["refusal_part"], claim.project_id, claim.trigger_id
        )
    return None


def _admit_args(fires: Sequence[FireRequest], *, wait: bool = False) -> list[Any]:
    c = [f.claim for f in fires]
    return [
        [x.project_id for x in c],
        [x.trigger_id for x in c],
        [x.fence.token for x in c],
        [x.fence.version for x in c],
        [x.state_version for x in c],
        [x.trigger_revision for x in c],
        [x.trigger_digest for x in c],
        [x.task_revision for x in c],
        [x.execution_revision_id for x in c],
        [f.scheduled_for_ms for f in fires],
        [f.next_ms for f in fires],
        [f.coalesced for f in fires],
        [f.run_id for f in fires],
        [f.attempt_id for f in fires],
        [f.idempotency_key for f in fires],
        [x.locator for x in c],
        wait,
    ]


class Admission:
    """Admits Fires over the admit pool, counting its statements and serialization retries.

    Ownership: borrows both pools (``probe_db`` serves only the look-ups after a lost
    reply) and the lease deadlines, which the store shares with its claims.
    """

    def __init__(
        self,
        db: Database,
        probe_db: Database,
        leases: LeaseDeadlines,
        *,
        retries: int,
        sink: DiagnosticSink | None,
    ) -> None:
        self._db = db
        self._probe_db = probe_db
        self._leases = leases
        self._retries = retries
        self._sink = sink
        self.statements = 0
        """Admit statements sent (batches, one-by-one and by-key admits, retries)."""
        self.ssi_retries = 0
        """Admit statements re-sent after a serialization failure or deadlock."""

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        """One outcome per Fire, in request order: the batch, then one by one if the batch
        failed on a constraint or other server error, then by key for the rows left.

        Raises:
            MixedOwners: the Fires were claimed by more than one owner.
            UnknownRefusal: admit.sql named a refusal this module does not know.
        """
        if not fires:
            return []
        owner = one_owner(fires)
        outcomes: list[Outcome | None] = [None] * len(fires)
        untouched: list[int] = []
        # (a) the batch, with its retries
        batch = await self._send(owner, fires)
        if isinstance(batch, _Failed) and len(fires) > 1:
            self._emit(
                Diagnostic(
                    code="admit_batch_fallback",
                    sqlstate=batch.sqlstate,
                    exception=batch.exception,
                    count=len(fires),
                )
            )
            # (b) one by one
            for i, fire in enumerate(fires):
                alone = await self._send(owner, [fire])
                untouched += self._place(alone, [fire], [i], outcomes)
        else:
            untouched = self._place(batch, fires, range(len(fires)), outcomes)
        # (c) by key, for the rows a statement left untouched
        await self._left(owner, fires, untouched, outcomes)
        done = [o for o in outcomes if o is not None]
        await self._count_taken([o for o in done if isinstance(o, AlreadyAdmitted)])
        return done

    async def _left(
        self,
        owner: str,
        fires: Sequence[FireRequest],
        untouched: Sequence[int],
        outcomes: list[Outcome | None],
    ) -> None:
        """The rows a statement left: together at their locators, waiting for them (the
        holder is most often another replica's claim statement, done in milliseconds);
        then by key, each alone, those still left (a stale locator) or all of them if that
        statement could not commit (a timeout, retries spent, a server error; never after
        a lost reply). Rejected: each alone by key at once, one statement per row (at 16
        replicas over a third of a drain's statements, its slow tail); together by key (an
        index probe per row: its SIRead locks on index pages made admits retry)."""
        left = list(untouched)
        if len(left) > 1:
            located = [fires[i] for i in left]
            together = await self._send(owner, located, wait=True)
            unknown = isinstance(together, _Ended) and any(
                isinstance(o, CommitUnknown) for o in together.outcomes
            )
            if isinstance(together, _Rows) or unknown:
                left = self._place(together, located, left, outcomes)
        for i in left:
            fire = _by_key(fires[i])
            alone = await self._send(owner, [fire])
            self._place(alone, [fire], [i], outcomes)

    async def _count_taken(self, taken: Sequence[AlreadyAdmitted]) -> None:
        """Count each key found taken on its row and report it. After the commit and
        unfenced: a lost count never changes a bucket (the key's Run is the occurrence's)."""
        sql = query("count_already_admitted")
        for outcome in taken:
            self._emit(
                Diagnostic(
                    code="already_admitted",
                    project_id=outcome.project_id,
                    trigger_id=outcome.trigger_id,
                    at_ms=outcome.scheduled_for_ms,
                )
            )
            try:

                async def fn(conn: Connection, o: AlreadyAdmitted = outcome) -> None:
                    await conn.execute(sql, o.project_id, o.trigger_id)

                await self._probe_db.run(fn)
            except Exception as exc:
                self._emit(
                    Diagnostic(
                        code="already_admitted_uncounted",
                        sqlstate=sqlstate(exc),
                        exception=type(exc).__name__,
                        project_id=outcome.project_id,
                        trigger_id=outcome.trigger_id,
                    )
                )

    def _place(
        self,
        sent: _Rows | _Ended | _Failed,
        fires: Sequence[FireRequest],
        places: Sequence[int],
        outcomes: list[Outcome | None],
    ) -> list[int]:
        """Put one statement's outcomes at their ``places``; return the places of the rows
        it left untouched, unless it already sent that row alone and by key."""
        match sent:
            case _Rows(rows=rows):
                untouched = []
                waited = len(fires) == 1 and fires[0].claim.locator is None
                for i, fire, row in zip(places, fires, rows, strict=True):
                    outcome = _row_outcome(fire, row)
                    if outcome is not None:
                        outcomes[i] = outcome
                    elif waited:  # alone, by key, waited for: the fenced write still missed
                        claim = fire.claim
                        outcomes[i] = FenceLost(claim.project_id, claim.trigger_id, part="state")
                    else:
                        untouched.append(i)
                return untouched
            case _Ended(outcomes=ended):
                for i, outcome in zip(places, ended, strict=True):
                    outcomes[i] = outcome
                return []
            case _Failed(sqlstate=state, exception=exception):
                # Only a one-row statement gets here: a failed batch falls back instead.
                (i,), (fire,) = places, fires
                claim = fire.claim
                self._emit(
                    Diagnostic(
                        code="admit_failed",
                        sqlstate=state,
                        exception=exception,
                        project_id=claim.project_id,
                        trigger_id=claim.trigger_id,
                    )
                )
                outcomes[i] = StoreFailed(
                    claim.project_id, claim.trigger_id, sqlstate=state, exception=exception
                )
                return []
            case _:
                assert_never(sent)

    async def _send(
        self, owner: str, fires: Sequence[FireRequest], *, wait: bool = False
    ) -> _Rows | _Ended | _Failed:
        """One admit statement for ``fires``, re-sent after a serialization failure or a
        deadlock while the retries and the lease allow."""
        sql = query("admit")
        args = _admit_args(fires, wait=wait)

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, owner, *args))

        attempt = 0
        while True:
            attempt += 1
            self.statements += 1
            try:
                return _Rows(await self._db.run(fn))
            except Exception as exc:
                kind, state = classify(exc), sqlstate(exc)
                if kind is ErrorKind.RETRYABLE:
                    if attempt <= self._retries and self._leases.left_s(fires) > 0:
                        self.ssi_retries += 1
                        await trio.sleep(random.uniform(0.001, 0.004) * attempt)
                        continue
                    return _Ended([_exhausted(f, attempt, state) for f in fires])
                if kind is ErrorKind.CONNECTION:
                    await self._probe_commit(fires, exc)
                    name = type(exc).__name__
                    return _Ended(
                        [
                            CommitUnknown(f.claim.project_id, f.claim.trigger_id, exception=name)
                            for f in fires
                        ]
                    )
                if kind is ErrorKind.TIMEOUT:
                    self._emit(
                        Diagnostic(
                            code=TIMEOUT_CODES.get(state or "", "admit_timeout"),
                            sqlstate=state,
                            exception=type(exc).__name__,
                            count=len(fires),
                        )
                    )
                    return _Ended([_exhausted(f, attempt, state) for f in fires])
                return _Failed(sqlstate=state, exception=type(exc).__name__)

    async def _probe_commit(self, fires: Sequence[FireRequest], exc: BaseException) -> None:
        """After a lost COMMIT reply, look the keys up on a fresh connection: diagnostic only.

        The answer never changes what happens next (the lease expires; the next claimer sees
        either the advanced cursor or the same occurrence under the same key)."""
        sql = query("run_by_key")
        found: dict[str, bool] = {}
        # One budget for all the probes, and none after one went unanswered: when the reply
        # was lost to a silent server, probing each key would hold the round per key.
        with trio.move_on_after(PROBE_BUDGET_S):
            for f in fires:
                try:

                    async def fn(conn: Connection, key: str = f.idempotency_key) -> Any:
                        return await conn.fetchval(sql, key)

                    found[f.idempotency_key] = await self._probe_db.run(fn) is not None
                except Exception:
                    break
        for f in fires:
            landed = found.get(f.idempotency_key)
            code = {
                True: "commit_unknown_landed",
                False: "commit_unknown_not_landed",
                None: "commit_unknown",
            }[landed]
            self._emit(
                Diagnostic(
                    code=code,
                    exception=type(exc).__name__,
                    project_id=f.claim.project_id,
                    trigger_id=f.claim.trigger_id,
                )
            )

    def _emit(self, d: Diagnostic) -> None:
        if self._sink is not None:
            self._sink.emit(d)
