"""The PostgreSQL schedule store: claim, admit (batch), initialize, skip, release.

Claims go over a READ COMMITTED pool, one statement in autocommit, so the lease commits at
once. Admits go over a pool whose connections default to SERIALIZABLE, and a whole round's
Fires are one statement (one implicit transaction, one round trip, one bridge crossing);
rows whose fence or revisions fail are left out with their own outcome. A serialization
failure or deadlock retries the batch while the lease has room; a lock or statement
timeout (55P03, 57014) ends admission for the round (``RetryExhausted``, claims left to
expire: it says nothing about one row); a constraint or other server error falls back to
one occurrence at a time, so one bad row never blocks the others; a lost connection is
``CommitUnknown`` and is never re-sent. A batch never waits
for a schedule row another session holds: it goes through without that row, which is then
admitted alone, waiting for it (at most the runtime role's ``lock_timeout``; past that
``RetryExhausted`` with SQLSTATE 55P03, not retried, its claim untouched, to expire).

Authority: the database decides every fence (its WHERE clauses and its clock); this module
only names the part that failed, from what the same statement observed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import trio

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.fence import (
    Claim,
    ClaimFence,
    FireRequest,
    ObservedSchedule,
    failed_part,
    refusal,
)
from qlsched.core.outcomes import (
    Admitted,
    CommitUnknown,
    DigestInvalid,
    FenceLost,
    Inactive,
    Initialized,
    Outcome,
    Released,
    RetryExhausted,
    RevisionChanged,
    Skip,
    Skipped,
    StoreFailed,
)
from qlsched.core.store import ScheduleView
from qlsched.postgres.errors import ErrorKind, classify, sqlstate
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query

LEASE_MARGIN_S = 0.5
"""Retries stop this long before the lease would expire by this process's reckoning."""

LOCK_NOT_AVAILABLE = "55P03"
"""SQLSTATE of a lock wait cut by the runtime role's lock_timeout."""
PROBE_BUDGET_S = 2.0
"""After a lost admit reply, the time all the diagnostic look-ups of its keys may take."""
TIMEOUT_CODES: Final[Mapping[str, str]] = {
    LOCK_NOT_AVAILABLE: "admit_lock_timeout",
    "57014": "admit_statement_timeout",
}
"""Diagnostic code of an admit ended by the runtime role's lock or statement timeout."""

ADMIT_SETTINGS: Final[Mapping[str, str]] = {
    "enable_seqscan": "off",
    "plan_cache_mode": "force_generic_plan",
}
"""Server settings of the admit pool. Every table the admit reads is reached by key or tuple
id; on a small or freshly analysed table the planner would rather scan it whole, and under
SERIALIZABLE a sequential scan takes a relation-level SIRead lock that makes every other
replica's admit conflict (measured, two replicas admitting one cron tick of 200 triggers:
22 % of admit statements retried while the lock step scanned the table). Generic plans: the
statement is large and a batch of one row kept getting a custom plan, re-planned at every
call (measured, claim 1 + admit 1 in a loop: 224-245 pairs/s, 347/s with the generic
plan; batches of 256 unchanged)."""
CLAIM_SETTINGS: Final[Mapping[str, str]] = {
    "enable_seqscan": "off",
    "plan_cache_mode": "force_generic_plan",
}
"""Server settings of the claim pool. The claim is the hot statement of every round; its
custom plans were re-planned on each call (measured on 1M schedule rows: claim p99 with
nothing due 1,218 us, with the generic plan 516 us). Its scans are index-ordered; on a
small table the generic plan otherwise re-found the claimed rows by a sequential scan."""


def _claim_from_row(row: Any) -> Claim:
    return Claim(
        project_id=row["project_id"],
        trigger_id=row["trigger_id"],
        trigger_revision=row["trigger_revision"],
        state_version=row["state_version"],
        fence=ClaimFence(
            owner=row["claim_owner"],
            token=row["claim_token"],
            version=row["claim_version"],
            expires_at_ms=row["claim_expires_at_ms"],
        ),
        cursor_ms=row["next_fire_at_ms"],
        claimed_at_ms=row["updated_at_ms"],
        cron=row["cron"],
        timezone=row["timezone"],
        misfire_policy=row["misfire_policy"],
        misfire_grace_ms=row["misfire_grace_ms"],
        trigger_digest=row["content_digest"],
        task_id=row["task_id"],
        task_revision=row["task_revision"],
        execution_revision_id=row["execution_revision_id"],
        locator=row["locator"],
    )


def _failure_outcome(fire: FireRequest, failure: str) -> Outcome:
    kind, _, part = failure.partition(":")
    p, t = fire.claim.project_id, fire.claim.trigger_id
    if kind == "revision_changed":
        return RevisionChanged(p, t, part=part)  # type: ignore[arg-type]
    if kind == "digest_invalid":
        return DigestInvalid(p, t, part=part)  # type: ignore[arg-type]
    if kind == "inactive":
        return Inactive(p, t, reason=part)  # type: ignore[arg-type]
    raise AssertionError(f"unknown admit failure code {failure!r}")


def _observed(row: Any) -> ObservedSchedule | None:
    """The schedule row as a statement read it back, or None: it was not there."""
    if row["trigger_revision"] is None:
        return None
    return ObservedSchedule(
        trigger_revision=row["trigger_revision"],
        claim_owner=row["claim_owner"],
        claim_token=row["claim_token"],
        claim_version=row["claim_version"],
        claim_expires_at_ms=row["claim_expires_at_ms"],
        state_version=row["state_version"],
        next_fire_at_ms=row["next_fire_at_ms"],
    )


def _row_outcome(fire: FireRequest, row: Any) -> Outcome | None:
    """One admit result row as its outcome; None: the row was left untouched although its
    fence, cursor and specs hold (held by another session, or not at its locator)."""
    if row["admitted_at_ms"] is not None:
        return Admitted(
            fire.claim.project_id,
            fire.claim.trigger_id,
            run_id=fire.run_id,
            attempt_id=fire.attempt_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=row["admitted_at_ms"],
        )
    part = failed_part(fire.claim, _observed(row), row["now_ms"], fire.scheduled_for_ms)
    if part is not None:
        return part
    if row["spec_failure"] is not None:
        return _failure_outcome(fire, row["spec_failure"])
    return None


def _by_key(fire: FireRequest) -> FireRequest:
    """The same Fire without its locator: the admit then finds the row by its key."""
    return msgspec.structs.replace(fire, claim=msgspec.structs.replace(fire.claim, locator=None))


def _exhausted(fire: FireRequest, attempts: int, state: str | None) -> Outcome:
    return RetryExhausted(
        fire.claim.project_id, fire.claim.trigger_id, attempts=attempts, sqlstate=state or ""
    )


def _admit_args(fires: Sequence[FireRequest]) -> list[Any]:
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
    ]


class PostgresStore:
    """ScheduleStore and ScheduleReader over two pools (claims, admits)."""

    def __init__(
        self,
        claim_db: Database,
        admit_db: Database,
        *,
        retries: int = 5,
        sink: DiagnosticSink | None = None,
    ) -> None:
        self._claim_db = claim_db
        self._admit_db = admit_db
        self._retries = retries
        self._sink = sink
        self._deadlines: dict[uuid.UUID, float] = {}
        self.ssi_retries = 0
        self.admit_statements = 0

    # --- claim ---------------------------------------------------------------------------

    async def claim(self, owner: str, limit: int, lease_ms: int) -> list[Claim]:
        sql = query("claim")

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, owner, limit, lease_ms))

        rows = await self._claim_db.run(fn)
        now = trio.current_time()
        deadline = now + lease_ms / 1000 - LEASE_MARGIN_S
        if self._deadlines:  # claims left to expire are never settled here: forget them
            self._deadlines = {k: v for k, v in self._deadlines.items() if v > now}
        claims = [_claim_from_row(r) for r in rows]
        for c in claims:
            self._deadlines[c.fence.token] = deadline
        return claims

    def _lease_left(self, fires: Sequence[FireRequest]) -> float:
        now = trio.current_time()
        return min(self._deadlines.get(f.claim.fence.token, now) for f in fires) - now

    def _forget(self, claims: Sequence[Claim]) -> None:
        for c in claims:
            self._deadlines.pop(c.fence.token, None)

    # --- admit ---------------------------------------------------------------------------

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        if not fires:
            return []
        owners = {f.claim.fence.owner for f in fires}
        if len(owners) > 1:  # one statement per owner; a replica has one owner
            by_owner: dict[str, list[int]] = {}
            for i, f in enumerate(fires):
                by_owner.setdefault(f.claim.fence.owner, []).append(i)
            results: list[Outcome | None] = [None] * len(fires)
            for idx in by_owner.values():
                for i, o in zip(idx, await self.admit([fires[i] for i in idx]), strict=True):
                    results[i] = o
            return [o for o in results if o is not None]
        try:
            return await self._admit_batch(fires)
        finally:
            self._forget([f.claim for f in fires])

    async def _admit_batch(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        """Admit ``fires`` in one statement, retrying serialization failures and deadlocks
        while the lease has room. Rows the statement left out as held by another session
        (only a batch of more than one skips them) are then admitted one by one, each
        waiting for its row."""
        sql = query("admit")
        owner = fires[0].claim.fence.owner
        args = _admit_args(fires)

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, owner, *args))

        attempt = 0
        while True:
            attempt += 1
            self.admit_statements += 1
            try:
                rows = await self._admit_db.run(fn)
            except Exception as exc:
                kind = classify(exc)
                state = sqlstate(exc)
                if kind is ErrorKind.RETRYABLE:
                    if attempt <= self._retries and self._lease_left(fires) > 0:
                        self.ssi_retries += 1
                        await trio.sleep(random.uniform(0.001, 0.004) * attempt)
                        continue
                    return [_exhausted(f, attempt, state) for f in fires]
                if kind is ErrorKind.CONNECTION:
                    await self._probe_commit(fires, exc)
                    return [
                        CommitUnknown(
                            f.claim.project_id, f.claim.trigger_id, exception=type(exc).__name__
                        )
                        for f in fires
                    ]
                if kind is ErrorKind.TIMEOUT:
                    # A lock wait or statement timeout says nothing about one row: falling
                    # back row by row would wait again per row, past the lease. Admission
                    # ends for this round; the claims are left to expire, not retried.
                    self._emit(
                        Diagnostic(
                            code=TIMEOUT_CODES.get(state or "", "admit_timeout"),
                            sqlstate=state,
                            exception=type(exc).__name__,
                            count=len(fires),
                        )
                    )
                    return [_exhausted(f, attempt, state) for f in fires]
                if len(fires) > 1:
                    self._emit(
                        Diagnostic(
                            code="admit_batch_fallback",
                            sqlstate=state,
                            exception=type(exc).__name__,
                            count=len(fires),
                        )
                    )
                    out: list[Outcome] = []
                    for f in fires:
                        out.extend(await self._admit_batch([f]))
                    return out
                f = fires[0]
                self._emit(
                    Diagnostic(
                        code="admit_failed",
                        sqlstate=state,
                        exception=type(exc).__name__,
                        project_id=f.claim.project_id,
                        trigger_id=f.claim.trigger_id,
                    )
                )
                return [
                    StoreFailed(
                        f.claim.project_id,
                        f.claim.trigger_id,
                        sqlstate=state,
                        exception=type(exc).__name__,
                    )
                ]
            outcomes: list[Outcome] = []
            for f, r in zip(fires, rows, strict=True):
                outcome = _row_outcome(f, r)
                if outcome is not None:
                    outcomes.append(outcome)
                elif len(fires) > 1 or f.claim.locator is not None:
                    # Left untouched though its fence, cursor and specs hold: held by another
                    # session (a batch skips such rows) or not where the locator says. Now
                    # alone and by key, waiting for the row (at most lock_timeout).
                    outcomes.extend(await self._admit_batch([_by_key(f)]))
                else:  # alone, by key, waited for: the fenced write still missed
                    outcomes.append(FenceLost(f.claim.project_id, f.claim.trigger_id, part="state"))
            return outcomes

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

                    found[f.idempotency_key] = await self._claim_db.run(fn) is not None
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

    # --- initialize / skip / release -----------------------------------------------------

    async def _settle(
        self, claim: Claim, *, keep_cursor: bool, next_ms: int | None, skipped: int
    ) -> tuple[int | None, ObservedSchedule | None, int, bool]:
        sql = query("settle")
        f = claim.fence

        async def fn(conn: Connection) -> Any:
            return await conn.fetchrow(
                sql,
                claim.project_id,
                claim.trigger_id,
                f.owner,
                f.token,
                f.version,
                claim.state_version,
                claim.trigger_revision,
                claim.cursor_ms,
                keep_cursor,
                next_ms,
                skipped,
                claim.trigger_digest,
            )

        try:
            row = await self._claim_db.run(fn)
        finally:
            self._forget([claim])
        return row["settled_at_ms"], _observed(row), row["now_ms"], row["spec_ok"]

    async def _settle_outcome(
        self, claim: Claim, ok: Outcome, *, keep_cursor: bool, next_ms: int | None, skipped: int
    ) -> Outcome:
        try:
            settled, observed, now_ms, spec_ok = await self._settle(
                claim, keep_cursor=keep_cursor, next_ms=next_ms, skipped=skipped
            )
        except Exception as exc:
            if classify(exc) is ErrorKind.CONNECTION:
                return CommitUnknown(
                    claim.project_id, claim.trigger_id, exception=type(exc).__name__
                )
            return StoreFailed(
                claim.project_id,
                claim.trigger_id,
                sqlstate=sqlstate(exc),
                exception=type(exc).__name__,
            )
        if settled is None:
            part = failed_part(claim, observed, now_ms, claim.cursor_ms)
            if part is None and not spec_ok:
                return RevisionChanged(claim.project_id, claim.trigger_id, part="trigger")
            return part or refusal(claim, observed, now_ms, claim.cursor_ms)
        return ok

    async def initialize(self, claim: Claim, next_ms: int) -> Outcome:
        return await self._settle_outcome(
            claim,
            Initialized(claim.project_id, claim.trigger_id, next_ms=next_ms),
            keep_cursor=False,
            next_ms=next_ms,
            skipped=0,
        )

    async def skip(self, claim: Claim, decision: Skip) -> Outcome:
        return await self._settle_outcome(
            claim,
            Skipped(
                claim.project_id,
                claim.trigger_id,
                next_ms=decision.next_ms,
                skipped=decision.skipped,
            ),
            keep_cursor=False,
            next_ms=decision.next_ms,
            skipped=decision.skipped,
        )

    async def release(self, claim: Claim) -> Outcome:
        return await self._settle_outcome(
            claim,
            Released(claim.project_id, claim.trigger_id),
            keep_cursor=True,
            next_ms=None,
            skipped=0,
        )

    # --- reader --------------------------------------------------------------------------

    async def due_backlog(self) -> int:
        sql = query("due_backlog")

        async def fn(conn: Connection) -> Any:
            return await conn.fetchval(sql)

        return int(await self._claim_db.run(fn))

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        sql = query("list_schedules")

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, limit))

        return [ScheduleView(**dict(r)) for r in await self._claim_db.run(fn)]
