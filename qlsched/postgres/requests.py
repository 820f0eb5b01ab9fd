"""Trigger-now and backfill requests in PostgreSQL: recorded by the admin, admitted by replicas.

Recording (admin role, one transaction): the trigger is read once (revision, enabled, cron,
zone, its project's state, the database time); a request for a missing, disabled or archived
trigger, a backfill range past the database's now or holding more occurrences than its
``max`` is refused before anything is written. Otherwise one row is inserted, pending, for
the revision read, with its audit row in ``schedule_actions`` (kind ``trigger`` or
``backfill``, occurrences 1 or the range's count, the request id in ``detail``); the id,
the role and the time are the database's (column defaults the admin's INSERT grant leaves
out).

Admission (runtime role) follows the schedule rows' rules: ``claim`` is one statement in
autocommit on the READ COMMITTED pool (the lease commits at once, ``SKIP LOCKED``); ``admit``
is one statement on the SERIALIZABLE pool that re-checks the four-part fence, the request's
cursor and the specs, inserts the chunk's Runs (a key already taken is counted, never
inserted twice), and moves the request's cursor, counts and state, all or nothing. A
serialization failure is retried while the lease has room; a lost reply is
``RequestCommitUnknown`` and never re-sent (the next claimer sends the same keys).

Authority: the database decides every fence and every refusal; this module reports them.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from qlsched.core.control import TriggerRef
from qlsched.core.diagnostics import Diagnostic
from qlsched.core.lease import retry_deadline_s
from qlsched.core.requests import (
    BACKFILL_MAX_HARD_CAP,
    REQUEST_FAILURES_MAX,
    NotRecorded,
    Recorded,
    RecordResult,
    RequestAdmitted,
    RequestAsk,
    RequestChunk,
    RequestClaim,
    RequestClaims,
    RequestCommitUnknown,
    RequestFailed,
    RequestFenceLost,
    RequestHeld,
    RequestOutcome,
    RequestOverlap,
    RequestRefused,
    RequestTarget,
    RequestWaiting,
    record_check,
)
from qlsched.postgres.claim import fence_from_row
from qlsched.postgres.control import record_action
from qlsched.postgres.errors import ErrorKind, classify, sqlstate
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query
from qlsched.postgres.retention import backfill_start_limit
from qlsched.postgres.store import ReplicaPools

# --- recording (admin) ----------------------------------------------------------------------


async def _record(
    conn: Connection, project_id: str, trigger_id: str, ask: RequestAsk
) -> RecordResult:
    kind, note, actor, span, overlap = ask.kind, ask.note, ask.actor, ask.span, ask.overlap
    max_occurrences = ask.max_occurrences
    async with conn.transaction():
        row = await conn.fetchrow(query("request_target"), project_id, trigger_id)
        target = (
            None
            if row is None
            else RequestTarget(**{k: row[k] for k in RequestTarget.__struct_fields__})
        )
        earliest = None
        if row is not None and span is not None:
            earliest = await backfill_start_limit(conn, project_id, trigger_id)
        checked = record_check(
            project_id,
            trigger_id,
            target,
            row["now_ms"] if row is not None else 0,
            span,
            max_occurrences,
            earliest_ms=earliest,
        )
        if isinstance(checked, NotRecorded):
            return checked
        assert row is not None
        total, first = checked
        inserted = await conn.fetchrow(
            query("request_insert"),
            project_id,
            trigger_id,
            row["revision"],
            kind,
            note,
            actor,
            span[0] if span is not None else None,
            span[1] if span is not None else None,
            total,
            max_occurrences,
            first,
            overlap,
        )
        assert inserted is not None
        detail: dict[str, Any] = {"request_id": str(inserted["request_id"])}
        if span is not None:
            detail.update(from_ms=span[0], to_ms=span[1])
        await record_action(
            conn,
            TriggerRef(project_id, trigger_id),
            revision=row["revision"],
            kind=kind,
            note=note,
            actor=actor,
            occurrences=1 if total is None else total,
            detail=detail,
        )
        return Recorded(
            request_id=inserted["request_id"],
            project_id=project_id,
            trigger_id=trigger_id,
            trigger_revision=row["revision"],
            kind=kind,
            created_at_ms=inserted["created_at_ms"],
            requested_by=inserted["requested_by"],
            total=total,
        )


async def record_trigger_now(
    conn: Connection,
    project_id: str,
    trigger_id: str,
    *,
    note: str | None = None,
    actor: str | None = None,
    overlap: RequestOverlap | None = None,
) -> RecordResult:
    """Record a trigger-now request for the trigger's current revision (admin role);
    ``overlap="allow"`` admits it whatever the trigger's overlap policy says."""
    ask = RequestAsk(kind="trigger", note=note, actor=actor, overlap=overlap)
    return await _record(conn, project_id, trigger_id, ask)


async def record_backfill(
    conn: Connection,
    project_id: str,
    trigger_id: str,
    *,
    from_ms: int,
    to_ms: int,
    max_occurrences: int,
    note: str | None = None,
    actor: str | None = None,
    overlap: RequestOverlap | None = None,
) -> RecordResult:
    """Record a backfill of the occurrences in ``[from_ms, to_ms]`` (admin role); refused
    with the exact count when the range holds more than ``max_occurrences``.
    ``overlap="allow"`` admits them whatever the trigger's overlap policy says."""
    if not from_ms <= to_ms:
        raise ValueError("from_ms must not be after to_ms")
    if not 1 <= max_occurrences <= BACKFILL_MAX_HARD_CAP:
        raise ValueError(f"max_occurrences must be 1..{BACKFILL_MAX_HARD_CAP}")
    ask = RequestAsk(
        kind="backfill",
        note=note,
        actor=actor,
        span=(from_ms, to_ms),
        max_occurrences=max_occurrences,
        overlap=overlap,
    )
    return await _record(conn, project_id, trigger_id, ask)


# --- admission (runtime) --------------------------------------------------------------------


def _claim_from_row(row: Any) -> RequestClaim:
    return RequestClaim(
        request_id=row["request_id"],
        project_id=row["project_id"],
        trigger_id=row["trigger_id"],
        trigger_revision=row["trigger_revision"],
        kind=row["kind"],
        created_at_ms=row["created_at_ms"],
        from_ms=row["from_ms"],
        to_ms=row["to_ms"],
        cursor_ms=row["cursor_ms"],
        fence=fence_from_row(row),
        claimed_at_ms=row["claimed_at_ms"],
        current_revision=row["current_revision"],
        cron=row["cron"],
        timezone=row["timezone"],
        dst_gap=row["dst_gap"],
        dst_fold=row["dst_fold"],
        trigger_digest=row["content_digest"],
        task_revision=row["task_revision"],
        execution_revision_id=row["execution_revision_id"],
        schedule_cursor_ms=row["schedule_cursor_ms"],
    )


def request_admit_args(chunk: RequestChunk) -> tuple[Any, ...]:
    """The parameters of ``request_admit`` for ``chunk``, in order."""
    c = chunk.claim
    return (
        c.request_id,
        c.fence.owner,
        c.fence.token,
        c.fence.version,
        c.cursor_ms,
        c.trigger_revision,
        c.trigger_digest,
        c.task_revision,
        c.execution_revision_id,
        chunk.occurrences,
        chunk.run_ids,
        chunk.attempt_ids,
        chunk.keys,
        chunk.cursor_ms,
        chunk.done,
        chunk.next_ms,
    )


class PostgresRequestStore(ReplicaPools):
    """The ``RequestStore`` port over a replica's two pools (claims, admits)."""

    statements: int = 0
    """Request statements sent (claims and admits, retries included)."""

    async def claim(self, owner: str, limit: int, lease_ms: int) -> RequestClaims:
        sql = query("request_claim")

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, owner, limit, lease_ms))

        self.statements += 1
        rows = await self._claim_db.run(fn)
        claims = [_claim_from_row(r) for r in rows if r["request_id"] is not None]
        return RequestClaims(any_pending=bool(rows[0]["any_pending"]), claims=claims)

    async def admit(self, chunk: RequestChunk) -> RequestOutcome:
        """Admit one request's chunk (possibly empty: that releases the claim) under its
        fence; retried on serialization failure while the lease has room."""
        c = chunk.claim
        ids = (c.request_id, c.project_id, c.trigger_id)
        deadline = retry_deadline_s(trio.current_time(), c.fence.expires_at_ms - c.claimed_at_ms)
        sql = query("request_admit")
        args = request_admit_args(chunk)

        async def fn(conn: Connection) -> Any:
            return await conn.fetchrow(sql, *args)

        attempt = 0
        while True:
            attempt += 1
            self.statements += 1
            try:
                row = await self._admit_db.run(fn)
            except Exception as exc:
                kind, state = classify(exc), sqlstate(exc)
                if (
                    kind is ErrorKind.RETRYABLE
                    and attempt <= self._retries
                    and deadline > trio.current_time()
                ):
                    await trio.sleep(random.uniform(0.001, 0.004) * attempt)
                    continue
                if kind is ErrorKind.CONNECTION:
                    self._emit("request_commit_unknown", c, exception=type(exc).__name__)
                    return RequestCommitUnknown(*ids, exception=type(exc).__name__)
                refused = await self._note_failure(c, f"request_failed:{(state or 'none').lower()}")
                if refused:
                    return RequestRefused(*ids, reason="failed_repeatedly")
                return RequestFailed(*ids, sqlstate=state, exception=type(exc).__name__)
            assert row is not None
            if not row["fenced"]:
                return RequestFenceLost(*ids)
            if row["refused_reason"] is not None:
                return RequestRefused(*ids, reason=row["refused_reason"])
            if row["held"]:
                return RequestHeld(*ids)
            if not row["bound_ok"] or (not chunk.occurrences and not chunk.done):
                return RequestWaiting(*ids)
            inserted, skipped = int(row["inserted"]), int(row["skipped"])
            return RequestAdmitted(
                *ids,
                admitted=inserted,
                already_admitted=len(chunk.occurrences) - inserted - skipped,
                overlap_skipped=skipped,
                done=row["state"] == "done",
            )

    async def _note_failure(self, c: RequestClaim, code: str) -> bool:
        """Give a failed request's claim back at once and count the failure; True when
        that refused it (``failed_repeatedly``). Best effort: if this fails too, the claim
        expires as before and the next failure is counted instead."""
        sql = query("request_note_failure")
        f = c.fence

        async def fn(conn: Connection) -> Any:
            return await conn.fetchval(
                sql, c.request_id, f.owner, f.token, f.version, REQUEST_FAILURES_MAX, code
            )

        try:
            state = await self._claim_db.run(fn)
        except Exception as exc:
            self._emit("request_failure_uncounted", c, exception=type(exc).__name__)
            return False
        refused: bool = state == "refused"
        return refused

    def _emit(
        self,
        code: str,
        c: RequestClaim,
        *,
        exception: str | None = None,
        sqlstate: str | None = None,
    ) -> None:
        if self._sink is not None:
            self._sink.emit(
                Diagnostic(
                    code=code,
                    project_id=c.project_id,
                    trigger_id=c.trigger_id,
                    exception=exception,
                    sqlstate=sqlstate,
                )
            )
