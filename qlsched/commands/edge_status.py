"""``qlsched edge status --db PATH [--json]``: schedules, backlog and recent Runs of the file,
read without the run lock (works while ``edge run`` holds the file)."""

from __future__ import annotations

import argparse
import datetime as dt

import msgspec
import trio

from qlsched.core.cron import dst_policy_label
from qlsched.core.shown import shown
from qlsched.sqlite.database import open_checked
from qlsched.sqlite.status import EdgeStatus, read_status


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def render(report: EdgeStatus) -> str:
    runner = f"pid {report.scheduler_pid}" if report.scheduler_pid else "not running"
    lines = [
        f"{shown(report.path)}   time {_iso(report.now_ms)}   scheduler {runner}",
        f"due backlog {report.due_backlog}   runs {report.runs_total}",
        f"{'TRIGGER':32} {'CRON':18} {'NEXT FIRE (UTC)':25} {'LAG':>8} {'SKIP':>5} {'COAL':>5}",
    ]
    for s in report.schedules:
        lag = "-"
        due = s.next_fire_at_ms if s.due_at_ms is None else s.due_at_ms
        if due is not None and due <= s.now_ms and s.active:
            lag = f"{(s.now_ms - due) / 1000:.1f}s"
        name = f"{s.project_id}/{s.trigger_id}" + ("" if s.active else " (off)")
        notes = [dst_policy_label(s.dst_gap, s.dst_fold)]
        if s.jitter_ms:
            notes.append(f"jitter_ms={s.jitter_ms} due {_iso(s.due_at_ms)}")
        lines.append(
            f"{name[:32]:32} {shown(s.cron)[:18]:18} {_iso(s.next_fire_at_ms):25} {lag:>8} "
            f"{s.skipped_total:>5} {s.coalesced_total:>5}" + "".join(f"  {n}" for n in notes if n)
        )
    lines += ["", "recent runs:"]
    for r in report.recent_runs:
        lag = "-" if r.queued_at_ms is None else f"{r.queued_at_ms - r.scheduled_for_ms} ms"
        lines.append(
            f"  {r.project_id}/{r.trigger_id} for {_iso(r.scheduled_for_ms)} "
            f"{r.state} by {shown(r.admitted_by_owner)} (lag {lag})"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace, db: str) -> int:
    async def body() -> EdgeStatus:
        database = await trio.to_thread.run_sync(
            lambda: open_checked(db, create=False, apply=False, query_only=True)
        )
        try:
            now = database.clock()
            return await database.call(lambda conn: read_status(conn, database.path, now))
        finally:
            database.close()

    report = trio.run(body)
    print(msgspec.json.encode(report).decode() if args.json else render(report))
    return 0
