"""Reading Runs: with their Attempts (``qlsched runs``), each trigger's last outcome
(``status``, ``/v1/schedules``) and the running and failed counts. Observer or runtime role."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from qlsched.core.store import ScheduleRow
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


Row = TypeVar("Row", bound=ScheduleRow)
RUN_COUNT_LIMIT = 10_000
"""``status`` counts running and failed Runs up to this many (``10000+`` past it)."""


async def with_outcomes(conn: Connection, rows: list[Row]) -> list[Row]:
    """Each schedule row with its trigger's latest finished Run (one statement for all)."""
    if not rows:
        return rows
    found = {
        (r["project_id"], r["trigger_id"]): r
        for r in await conn.fetch(
            query("last_outcomes"),
            [row.project_id for row in rows],
            [row.trigger_id for row in rows],
        )
    }
    out: list[Row] = []
    for row in rows:
        o = found.get((row.project_id, row.trigger_id))
        if o is not None:
            row = msgspec.structs.replace(
                row,
                last_outcome=o["state"],
                last_duration_ms=o["duration_ms"],
                last_finished_at_ms=o["finished_at_ms"],
            )
        out.append(row)
    return out


async def run_state_counts(conn: Connection) -> tuple[int, int]:
    """(running, failed) Runs, each counted up to ``RUN_COUNT_LIMIT``."""
    row = await conn.fetchrow(query("run_state_counts"), RUN_COUNT_LIMIT)
    assert row is not None
    return int(row["running"]), int(row["failed"])
