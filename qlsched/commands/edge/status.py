"""``qlsched edge status --db PATH [--json]``: schedules, backlog, trigger-now and backfill
requests (pending, held, progress) and recent Runs of the file, read without the run lock
(works while ``edge run`` holds the file)."""

from __future__ import annotations

import argparse
import sys
from typing import IO

import msgspec
import trio

from qlsched.core.shown import shown
from qlsched.edge.lock import holder_pid
from qlsched.signals import interruptible
from qlsched.sqlite.database import open_checked
from qlsched.sqlite.status import EdgeStatus, read_status


def render(report: EdgeStatus, file: IO[str] | None = None) -> None:
    """Print the report with ``status``'s table: styled on a terminal, plain otherwise.
    (rich is imported here: parsing ``edge run``'s flags must not load it.)"""
    from qlsched.commands.tables import (
        console_for,
        iso,
        print_schedules,
        recent_run_line,
        request_line,
    )

    console, terminal = console_for(file if file is not None else sys.stdout)
    runner = f"pid {report.scheduler_pid}" if report.scheduler_pid else "not running"
    console.print(
        f"{shown(report.path)}   time {iso(report.now_ms)}   scheduler {runner}",
        markup=False,
    )
    console.print(f"due backlog {report.due_backlog}   runs {report.runs_total}", markup=False)
    if report.schedules:
        print_schedules(console, report.schedules, report.now_ms, terminal=terminal)
    else:
        console.print("no triggers published (qlsched edge publish FILE.toml)", markup=False)
    for q in report.requests:
        console.print(request_line(q), markup=False)
    console.print("recent runs:" if report.recent_runs else "recent runs: none", markup=False)
    for r in report.recent_runs:
        console.print(recent_run_line(r), markup=False)


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace, db: str) -> int:
    async def body() -> EdgeStatus:
        database = await trio.to_thread.run_sync(
            lambda: open_checked(db, create=False, apply=False, query_only=True)
        )
        try:
            now = database.clock()
            pid = holder_pid(database.path)
            return await database.call(
                lambda conn: read_status(conn, database.path, now, scheduler_pid=pid)
            )
        finally:
            database.close()

    report = trio.run(interruptible, body)
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        render(report)
    return 0
