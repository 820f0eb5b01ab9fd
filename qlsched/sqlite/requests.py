"""Trigger-now and backfill requests on the Edge file, as the cluster's
(``postgres/requests.py``): recorded by ``edge trigger`` / ``edge backfill``
(``sqlite.request_record``), admitted here by the file's one ``edge run``.

Admission has no lease (one runner per file): ``claim`` is a read of the requests that can
progress, and each chunk is admitted in its own ``BEGIN IMMEDIATE`` transaction, fenced by
the request's state and cursor (compare-and-set), with the trigger's pause, revision, pins
and cron cursor re-checked inside it. A key already taken is counted (``already_admitted``),
never inserted twice. An admit that cannot commit (a constraint) is counted and refused
``failed_repeatedly`` at ``REQUEST_FAILURES_MAX`` in a row; a locked or failing file raises,
as a round's write does (the runner reports it and tries again next round).
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from qlsched.core.fence import ClaimFence
from qlsched.core.overlap import Decision, chunk_decisions, reads_runs
from qlsched.core.requests import (
    REQUEST_FAILURES_MAX,
    RefusedReason,
    RequestAdmitted,
    RequestChunk,
    RequestClaim,
    RequestClaims,
    RequestFailed,
    RequestFenceLost,
    RequestHeld,
    RequestOutcome,
    RequestRefused,
    RequestWaiting,
)
from qlsched.core.specs import Overlap
from qlsched.sqlite.database import EdgeDatabase, rollback
from qlsched.sqlite.errors import classify, error_code
from qlsched.sqlite.overlap import cancel_others, unfinished
from qlsched.sqlite.queries import query
from qlsched.sqlite.runs import RunRows, admitted_as, execution_fault, insert_runs

NOMINAL_VERSION = 0
"""The claim version recorded on a request's Runs: nominal, as nothing expires on the Edge."""


def _claim(r: Any, owner: str, token: uuid.UUID, now_ms: int, lease_ms: int) -> RequestClaim:
    return RequestClaim(
        request_id=uuid.UUID(r[0]),
        project_id=r[1],
        trigger_id=r[2],
        trigger_revision=r[3],
        kind=r[4],
        created_at_ms=r[5],
        from_ms=r[6],
        to_ms=r[7],
        cursor_ms=r[8],
        fence=ClaimFence(
            owner=owner, token=token, version=NOMINAL_VERSION, expires_at_ms=now_ms + lease_ms
        ),
        claimed_at_ms=now_ms,
        current_revision=r[9],
        cron=r[10],
        timezone=r[11],
        dst_gap=r[12],
        dst_fold=r[13],
        trigger_digest=r[14],
        task_revision=r[15],
        execution_revision_id=uuid.UUID(r[16]),
        schedule_cursor_ms=r[17],
    )


def _failure(
    conn: sqlite3.Connection, c: RequestClaim, sched: Any, fenced: Any, chunk_size: int
) -> RefusedReason | None:
    """Why the request can never be admitted, checked inside the admit's transaction (the
    rule of the cluster's ``request_admit``), or None."""
    if sched is None:
        return "revision_changed"
    _cursor, _paused, revision, enabled, digest, task_revision, execution, _task, project = sched[
        :9
    ]
    _kind, total, admitted, already, asked, skipped, _overlap = fenced
    if project != "active":
        return "project_archived"
    if not enabled:
        return "trigger_disabled"
    if (revision, digest, task_revision, execution) != (
        asked,
        c.trigger_digest,
        c.task_revision,
        str(c.execution_revision_id),
    ) or revision != c.trigger_revision:
        return "revision_changed"
    match execution_fault(conn, c.execution_revision_id, c.task_revision):
        case None:
            pass
        case "task":
            return "revision_changed"
        case _:
            return "digest_invalid"
    if admitted + already + skipped + chunk_size > (1 if total is None else total):
        return "count_mismatch"
    return None


def _run_rows(
    chunk: RequestChunk,
    task_id: str,
    now_ms: int,
    decisions: list[Decision],
    deadline_ms: int | None,
) -> list[RunRows]:
    """The rows of the occurrences the overlap policy gives a Run (``queue`` or ``hold``)."""
    c = chunk.claim
    owner, token = c.fence.owner, str(c.fence.token)
    rows: list[RunRows] = []
    for at, key, run_id, attempt_id, decision in zip(
        chunk.occurrences, chunk.keys, chunk.run_ids, chunk.attempt_ids, decisions, strict=True
    ):
        if decision == "skip":
            continue
        run = str(run_id)
        state, start_by, second = admitted_as(decision, now_ms, deadline_ms)
        rows.append(
            (
                (
                    *(run, c.project_id, c.trigger_id, c.trigger_revision, task_id),
                    *(c.task_revision, str(c.execution_revision_id), at, key, now_ms),
                    *(owner, token, NOMINAL_VERSION, state, start_by),
                ),
                (str(attempt_id), run, now_ms),
                (str(uuid.uuid4()), str(uuid.uuid4()), run, now_ms, owner, second),
            )
        )
    return rows


def _decisions(conn: sqlite3.Connection, chunk: RequestChunk, policy: Overlap) -> list[Decision]:
    """What the policy the request follows gives each occurrence."""
    if not reads_runs(policy):
        return ["queue"] * len(chunk.occurrences)
    c = chunk.claim
    active, held = unfinished(conn, c.project_id, c.trigger_id)
    return chunk_decisions(policy, active, held, len(chunk.occurrences))


def _admit_in(conn: sqlite3.Connection, chunk: RequestChunk, now_ms: int) -> RequestOutcome:
    """One chunk inside the admit's open transaction (the caller commits)."""
    c = chunk.claim
    ids = (c.request_id, c.project_id, c.trigger_id)
    request = str(c.request_id)
    fenced = conn.execute(query("request_fenced"), (request, c.cursor_ms)).fetchone()
    if fenced is None:
        return RequestFenceLost(*ids)
    sched = conn.execute(query("request_schedule"), (c.project_id, c.trigger_id)).fetchone()
    reason = _failure(conn, c, sched, fenced, len(chunk.occurrences))
    if reason is not None:
        conn.execute(query("request_refuse"), (request, reason, now_ms))
        return RequestRefused(*ids, reason=reason)
    cursor, paused, task_id = sched[0], bool(sched[1]), sched[7]
    if paused:
        return RequestHeld(*ids)
    backfill = fenced[0] == "backfill"
    if backfill and (cursor is None or any(t >= cursor for t in chunk.occurrences)):
        return RequestWaiting(*ids)
    if backfill and not chunk.occurrences and not chunk.done:
        conn.execute(query("request_wait"), (request, chunk.next_ms, now_ms))
        return RequestWaiting(*ids)
    # The trigger's policy, unless the request was recorded with `allow`.
    policy: Overlap = fenced[6] or sched[9]
    deadline = sched[10]
    decisions = _decisions(conn, chunk, policy)
    rows = _run_rows(chunk, task_id, now_ms, decisions, deadline)
    taken = insert_runs(conn, rows)
    skipped = decisions.count("skip")
    inserted = len(rows) - len(taken)
    if policy == "cancel_other" and inserted:
        new = [r[0][0] for r in rows if uuid.UUID(r[0][0]) not in taken]
        cancel_others(conn, c.project_id, c.trigger_id, new, now_ms, c.fence.owner)
    conn.execute(
        query("request_settle"),
        (
            *(request, chunk.cursor_ms if backfill else None),
            *(chunk.next_ms if backfill else None, inserted, len(taken), chunk.done, now_ms),
            skipped,
        ),
    )
    return RequestAdmitted(
        *ids,
        admitted=inserted,
        already_admitted=len(taken),
        overlap_skipped=skipped,
        done=chunk.done,
    )


class SqliteRequestStore:
    """The ``RequestStore`` port over one Edge file (no lease: see the module docstring).

    Ownership: borrows ``db``; its opener closes it.
    """

    def __init__(self, db: EdgeDatabase, *, failures_max: int = REQUEST_FAILURES_MAX) -> None:
        self._db = db
        self._failures_max = failures_max

    async def claim(self, owner: str, limit: int, lease_ms: int) -> RequestClaims:
        """Read up to ``limit`` pending requests that can progress, trigger-now first."""

        def read(conn: sqlite3.Connection) -> RequestClaims:
            now, token = self._db.clock(), uuid.uuid4()
            rows = conn.execute(query("request_ready"), (limit,)).fetchall()
            claims = [_claim(r, owner, token, now, lease_ms) for r in rows]
            return RequestClaims(any_pending=bool(claims), claims=claims)

        return await self._db.call(read)

    async def admit(self, chunk: RequestChunk) -> RequestOutcome:
        """Admit one chunk in its own transaction (an empty one moves nothing but the
        request's state: done, waiting, held or refused).

        Raises:
            EdgeDatabaseError: the file is locked past the busy timeout or failing (full,
                read-only): nothing of the chunk was written, and nothing counted.
        """
        return await self._db.call(lambda conn: self._admit(conn, chunk))

    def _admit(self, conn: sqlite3.Connection, chunk: RequestChunk) -> RequestOutcome:
        now = self._db.clock()
        conn.execute(query("begin_immediate"))
        try:
            outcome = _admit_in(conn, chunk, now)
            conn.execute(query("commit"))
        except sqlite3.Error as exc:
            rollback(conn)
            typed = classify(exc, self._db.path)
            if typed.fatal or typed.code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise
            return self._note_failure(conn, chunk.claim, exc, now)
        except BaseException:
            rollback(conn)
            raise
        return outcome

    def _note_failure(
        self, conn: sqlite3.Connection, c: RequestClaim, exc: sqlite3.Error, now_ms: int
    ) -> RequestOutcome:
        """Count a failed admit; refused ``failed_repeatedly`` at the bound."""
        ids = (c.request_id, c.project_id, c.trigger_id)
        code = error_code(exc)
        last = f"request_failed:{code.lower()}"[:80]
        conn.execute(query("begin_immediate"))
        try:
            row = conn.execute(
                query("request_note_failure"),
                (str(c.request_id), self._failures_max, last, now_ms),
            ).fetchone()
            conn.execute(query("commit"))
        except BaseException:
            rollback(conn)
            raise
        if row is not None and row[0] == "refused":
            return RequestRefused(*ids, reason="failed_repeatedly")
        return RequestFailed(*ids, sqlstate=code, exception=type(exc).__name__)
