"""Reading Runs with their Attempts (``qlsched runs``), as the observer role."""

from __future__ import annotations

import msgspec

from qlsched.core.work import AttemptView, RunView
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


async def recent_runs(
    conn: Connection,
    *,
    project_id: str | None,
    trigger_id: str | None,
    state: str | None,
    limit: int,
) -> list[RunView]:
    rows = await conn.fetch(query("runs_recent"), project_id, trigger_id, state, limit)
    return [
        RunView(
            run_id=r["run_id"],
            project_id=r["project_id"],
            trigger_id=r["trigger_id"],
            task_id=r["task_id"],
            state=r["state"],
            scheduled_for_ms=int(r["scheduled_for_ms"]),
            idempotency_key=r["idempotency_key"],
            queued_at_ms=r["queued_at_ms"],
            started_at_ms=r["started_at_ms"],
            finished_at_ms=r["finished_at_ms"],
            cancel_requested=bool(r["cancel_requested"]),
            attempts=msgspec.json.decode(r["attempts"] or "[]", type=list[AttemptView]),
        )
        for r in rows
    ]
