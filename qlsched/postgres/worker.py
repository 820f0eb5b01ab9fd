"""The worker's protocol on PostgreSQL (docs/contract.md §13), as ``qlsched_worker``.

Authority: the scheduler ends at a queued Run with its pristine Attempt; from the claim on,
an Attempt is the worker's, held under a lease (token + expiry by the database clock). Each
verb is one statement, one implicit transaction, with its events:

- ``claim``: up to k claimable Runs, ``SKIP LOCKED``, oldest first, committed at once.
- ``heartbeat``: extends the lease (fenced); says whether the Run was asked to cancel.
- ``finish``: writes the outcome and the Run's next state under the fence; a lost
  connection is ``FinishUnknown`` and is never re-sent.
- ``reap``: Attempts whose lease expired become ``lost``; the retry policy decides.

After a finish or a reap that ended a Run, its trigger's held Run (overlap ``buffer_one``)
is released in a statement of its own, so that statement sees the Run ended; if it fails,
a replica's runs pass releases it within a few cadences.

A statement the server refused committed nothing: a lost race for an event number (23505)
or a serialization failure is sent again a bounded number of times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from qlsched.core.control import TriggerRef
from qlsched.core.work import (
    ClaimedRun,
    Extended,
    FenceRefused,
    Finished,
    FinishOutcome,
    FinishUnknown,
    HeartbeatOutcome,
    JobResult,
    LeaseLost,
    Reaped,
)
from qlsched.postgres.errors import ErrorKind, classify
from qlsched.postgres.overlap import release_held
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query

T = TypeVar("T")
SEND_ATTEMPTS = 3
"""Sends of a statement the server refused with a retryable or unique error."""


async def _resend(db: Database, fn: Callable[[Connection], Awaitable[T]]) -> T:
    """Run ``fn``; again when the server refused it (nothing committed) with a lost race."""
    for attempt in range(1, SEND_ATTEMPTS + 1):
        try:
            return await db.run(fn)
        except Exception as exc:
            if attempt == SEND_ATTEMPTS or classify(exc) not in (
                ErrorKind.RETRYABLE,
                ErrorKind.UNIQUE,
            ):
                raise
    raise AssertionError("unreachable")


def _claimed(r: Any) -> ClaimedRun:
    return ClaimedRun(
        attempt_id=r["attempt_id"],
        run_id=r["run_id"],
        attempt_no=int(r["attempt_no"]),
        lease_token=r["lease_token"],
        lease_expires_at_ms=int(r["lease_expires_at_ms"]),
        started_at_ms=int(r["started_at_ms"]),
        project_id=r["project_id"],
        task_id=r["task_id"],
        trigger_id=r["trigger_id"],
        idempotency_key=r["idempotency_key"],
        scheduled_for_ms=int(r["scheduled_for_ms"]),
        payload=r["payload"],
    )


async def claim(
    db: Database,
    *,
    worker_id: str,
    session_id: str,
    limit: int,
    lease_ms: int,
    tasks: list[str] | None = None,
) -> list[ClaimedRun]:
    """Claim up to ``limit`` Runs for this worker (one statement, committed at once), of
    the tasks named ``project/task`` in ``tasks`` (None: any; empty: none, and no
    statement). A worker of named tasks reads only their Runs (``worker_claim_tasks``)."""
    if tasks is not None and not tasks:
        return []
    args = (worker_id, session_id, limit, lease_ms)

    async def fn(conn: Connection) -> list[ClaimedRun]:
        if tasks is None:
            rows = await conn.fetch(query("worker_claim"), *args)
        else:
            rows = await conn.fetch(query("worker_claim_tasks"), *args, tasks)
        return [_claimed(r) for r in rows]

    return await _resend(db, fn)


async def heartbeat(
    db: Database, *, attempt_id: str, lease_token: str, lease_ms: int
) -> HeartbeatOutcome:
    """Extend the lease, fenced by (attempt, token, not expired by the database clock)."""

    async def fn(conn: Connection) -> HeartbeatOutcome:
        row = await conn.fetchrow(query("worker_heartbeat"), attempt_id, lease_token, lease_ms)
        if row is None:
            return LeaseLost()
        return Extended(
            lease_expires_at_ms=int(row["lease_expires_at_ms"]),
            cancel_requested=bool(row["cancel_requested"]),
        )

    return await _resend(db, fn)


async def _release_after(db: Database, ended: list[TriggerRef], actor: str) -> None:
    """Release the held Runs of the triggers whose Runs just ended. Best effort by design:
    the replicas' runs pass is what guarantees the release (this only makes it prompt)."""
    if not ended:
        return
    try:
        await release_held(db, limit=len(ended), actor=actor, triggers=ended)
    except Exception as exc:
        if classify(exc) is ErrorKind.OTHER:
            raise


async def finish(
    db: Database,
    *,
    attempt_id: str,
    lease_token: str,
    result: JobResult,
    actor: str = "worker",
) -> FinishOutcome:
    """Write ``result`` and the Run's next state, fenced like ``heartbeat``.

    Returns ``FinishUnknown`` when the connection was lost during the statement (its COMMIT
    may have landed); the caller must not send it again: an Attempt that did not finish is
    marked lost when its lease expires, so nothing ever gets two terminal states.
    """
    error = None if result.end == "succeeded" else result.code

    ended: list[TriggerRef] = []

    async def fn(conn: Connection) -> FinishOutcome:
        row = await conn.fetchrow(
            query("worker_finish"),
            attempt_id,
            lease_token,
            result.end,
            result.code,
            error,
            result.exit_code,
            result.output_tail,
        )
        if row is None:
            return FenceRefused()
        retry_at = row["retry_at_ms"] if row["retry"] else None
        if not row["retry"]:
            ended[:] = [TriggerRef(row["project_id"], row["trigger_id"])]
        return Finished(run_state=row["run_state"], retry_at_ms=retry_at)

    try:
        outcome = await _resend(db, fn)
    except Exception as exc:
        if classify(exc) is ErrorKind.CONNECTION:
            return FinishUnknown(exception=type(exc).__name__)
        raise
    await _release_after(db, ended, actor)
    return outcome


async def reap(db: Database, *, limit: int, actor: str) -> list[Reaped]:
    """Mark up to ``limit`` expired Attempts lost and apply each Run's retry policy."""

    ended: list[TriggerRef] = []

    async def fn(conn: Connection) -> list[Reaped]:
        rows = await conn.fetch(query("worker_reap"), limit, actor)
        ended[:] = sorted(
            {
                TriggerRef(r["project_id"], r["trigger_id"])
                for r in rows
                if r["retry_at_ms"] is None
            },
            key=str,
        )
        return [
            Reaped(
                attempt_id=r["attempt_id"],
                run_id=r["run_id"],
                run_state=r["run_state"],
                retry_at_ms=None if r["retry_at_ms"] is None else int(r["retry_at_ms"]),
            )
            for r in rows
        ]

    reaped = await _resend(db, fn)
    await _release_after(db, ended, actor)
    return reaped
