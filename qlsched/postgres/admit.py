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
(with ``admit_rows``, what each result row means) only names the part that failed, from
what the same statement observed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Final, assert_never

import trio

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.fence import FireRequest
from qlsched.core.outcomes import (
    LOCK_NOT_AVAILABLE,
    AlreadyAdmitted,
    CommitUnknown,
    FenceLost,
    Outcome,
    StoreFailed,
)
from qlsched.postgres.admit_rows import (
    Early,
    Ended,
    Failed,
    Rows,
    admit_args,
    by_key,
    exhausted,
    one_owner,
    row_outcome,
)
from qlsched.postgres.claim import LeaseDeadlines
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

PROBE_BUDGET_S: Final = 2.0
"""After a lost admit reply, the time all the diagnostic look-ups of its keys may take."""
EARLY_SENDS: Final = 3
"""How many times rows claimed ahead and sent before they were due are sent again."""
EARLY_SLACK_S: Final = 0.002
"""Sent again this long after the due time the statement reported, so they are due."""
TIMEOUT_CODES: Final[Mapping[str, str]] = {
    LOCK_NOT_AVAILABLE: "admit_lock_timeout",
    "57014": "admit_statement_timeout",
}
"""Diagnostic code of an admit ended by the runtime role's lock or statement timeout."""


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
        self.early_sends = 0
        """Times rows sent before they were due by the database clock were sent again."""

    async def warm(self, owner: str, connections: int) -> None:
        """Send the admit statement with no rows on ``connections`` admit connections: each
        prepares it (parse and generic plan, the larger part of a first admit's time) before
        the first due row needs it, not at that row's expense. Writes nothing."""
        sql = query("admit")
        args = admit_args([])

        async def fn(conn: Connection) -> None:
            await conn.fetch(sql, owner, *args)

        await self._db.run_each(connections, fn)

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        """One outcome per Fire, in request order: the batch, then one by one if the batch
        failed on a constraint or other server error, then by key for the rows left; rows
        not due yet by the database clock (claimed ahead, sent early) are sent again when
        due, at most ``EARLY_SENDS`` times and while their lease has room, else given up as
        ``RetryExhausted`` (released by the store).

        Raises:
            MixedOwners: the Fires were claimed by more than one owner.
            UnknownRefusal: admit.sql named a refusal this module does not know.
        """
        if not fires:
            return []
        owner = one_owner(fires)
        outcomes = await self._phases(owner, fires)
        sends = 1
        for _ in range(EARLY_SENDS):
            early = {i: o for i, o in enumerate(outcomes) if isinstance(o, Early)}
            if not early:
                break
            wait_s = max(o.due_in_ms for o in early.values()) / 1000 + EARLY_SLACK_S
            again = [fires[i] for i in early]
            if self._leases.left_s(again) <= wait_s:
                break
            self.early_sends += 1
            sends += 1
            await trio.sleep(wait_s)
            for i, outcome in zip(early, await self._phases(owner, again), strict=True):
                outcomes[i] = outcome
        done: list[Outcome] = []
        for fire, outcome in zip(fires, outcomes, strict=True):
            if isinstance(outcome, Early):
                claim = fire.claim
                self._emit(
                    Diagnostic(
                        code="admit_not_due",
                        project_id=claim.project_id,
                        trigger_id=claim.trigger_id,
                        at_ms=fire.scheduled_for_ms,
                    )
                )
                outcome = exhausted(fire, sends, None)
            done.append(outcome)
        await self._count_taken([o for o in done if isinstance(o, AlreadyAdmitted)])
        return done

    async def _phases(self, owner: str, fires: Sequence[FireRequest]) -> list[Outcome | Early]:
        """The batch, one by one after a failed batch, then the rows left: one outcome (or
        ``Early``) per Fire, in request order."""
        outcomes: list[Outcome | Early | None] = [None] * len(fires)
        untouched: list[int] = []
        # (a) the batch, with its retries
        batch = await self._send(owner, fires)
        if isinstance(batch, Failed) and len(fires) > 1:
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
        return [o for o in outcomes if o is not None]

    async def _left(
        self,
        owner: str,
        fires: Sequence[FireRequest],
        untouched: Sequence[int],
        outcomes: list[Outcome | Early | None],
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
            unknown = isinstance(together, Ended) and any(
                isinstance(o, CommitUnknown) for o in together.outcomes
            )
            if isinstance(together, Rows) or unknown:
                left = self._place(together, located, left, outcomes)
        for i in left:
            fire = by_key(fires[i])
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
        sent: Rows | Ended | Failed,
        fires: Sequence[FireRequest],
        places: Sequence[int],
        outcomes: list[Outcome | Early | None],
    ) -> list[int]:
        """Put one statement's outcomes at their ``places``; return the places of the rows
        it left untouched, unless it already sent that row alone and by key."""
        match sent:
            case Rows(rows=rows):
                untouched = []
                waited = len(fires) == 1 and fires[0].claim.locator is None
                for i, fire, row in zip(places, fires, rows, strict=True):
                    outcome = row_outcome(fire, row)
                    if outcome is not None:
                        outcomes[i] = outcome
                    elif waited:  # alone, by key, waited for: the fenced write still missed
                        claim = fire.claim
                        outcomes[i] = FenceLost(claim.project_id, claim.trigger_id, part="state")
                    else:
                        untouched.append(i)
                return untouched
            case Ended(outcomes=ended):
                for i, outcome in zip(places, ended, strict=True):
                    outcomes[i] = outcome
                return []
            case Failed(sqlstate=state, exception=exception):
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
    ) -> Rows | Ended | Failed:
        """One admit statement for ``fires``, re-sent after a serialization failure or a
        deadlock while the retries and the lease allow."""
        sql = query("admit")
        args = admit_args(fires, wait=wait)

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, owner, *args))

        attempt = 0
        while True:
            attempt += 1
            self.statements += 1
            try:
                return Rows(await self._db.run(fn))
            except Exception as exc:
                kind, state = classify(exc), sqlstate(exc)
                if kind is ErrorKind.RETRYABLE:
                    if attempt <= self._retries and self._leases.left_s(fires) > 0:
                        self.ssi_retries += 1
                        await trio.sleep(random.uniform(0.001, 0.004) * attempt)
                        continue
                    return Ended([exhausted(f, attempt, state) for f in fires])
                if kind is ErrorKind.CONNECTION:
                    await self._probe_commit(fires, exc)
                    name = type(exc).__name__
                    return Ended(
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
                    return Ended([exhausted(f, attempt, state) for f in fires])
                return Failed(sqlstate=state, exception=type(exc).__name__)

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
