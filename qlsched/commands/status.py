"""``qlsched status``: per trigger its zone, next fire time, claim holder and lease left, lag,
skipped and coalesced counts; the pause state, paused_total and last control actions of
the triggers that have any; recent runs. Observer DSN; ``--json`` for scripts.

Tables come from rich: boxed and bold on a terminal, plain whitespace-aligned columns with
no escape codes when stdout is a pipe or a file. ``--json`` prints one object whose
``now_ms`` (the database's clock) is given once, at the top level.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO

import msgspec

from qlsched.commands._common import run_command
from qlsched.commands._local import local_dsn
from qlsched.commands.options import add_database_options
from qlsched.commands.retention import pruned_line, setting_line
from qlsched.commands.tables import (
    console_for,
    iso,
    print_schedules,
    recent_run_line,
    request_line,
)
from qlsched.core.control import ScheduleAction
from qlsched.core.shown import shown
from qlsched.postgres.login import OBSERVER, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.status import STATUS_LIMIT, StatusReport, read_status
from qlsched.settings import load_config


def _action_text(a: ScheduleAction) -> str:
    who = shown(a.actor) if a.actor_label is None else f"{shown(a.actor)} ({shown(a.actor_label)})"
    return f"{a.kind} {iso(a.at_ms)} by {who}"


def control_lines(report: StatusReport) -> list[str]:
    """One line per trigger with a pause state, a paused_total or control actions: since
    when and why it is paused, what pauses cost it, its latest actions (newest first)."""
    lines: list[str] = []
    for s in report.schedules:
        if s.paused_at_ms is None and not s.paused_total and not s.actions:
            continue
        parts = [f"{s.project_id}/{s.trigger_id}"]
        if s.paused_at_ms is not None:
            note = "" if s.pause_note is None else f" ({shown(s.pause_note)})"
            parts.append(f"paused since {iso(s.paused_at_ms)}{note};")
        parts.append(f"paused_total {s.paused_total};")
        if s.actions:
            parts.append("last actions: " + ", ".join(_action_text(a) for a in s.actions))
        lines.append("  " + " ".join(parts).rstrip(";"))
    return lines


def outcome_lines(report: StatusReport) -> list[str]:
    """The worker's side: running and failed Runs, and each trigger's last outcome."""
    lines = [f"runs: {report.runs_running} running, {report.runs_failed} failed"]
    for s in report.schedules:
        if s.last_outcome is None:
            continue
        took = "" if s.last_duration_ms is None else f" in {s.last_duration_ms} ms"
        lines.append(
            f"  last run {s.project_id}/{s.trigger_id}: {s.last_outcome}{took}"
            f" at {iso(s.last_finished_at_ms)}"
        )
    return lines


def _backlog(report: StatusReport) -> str:
    """The bounded count: ``1000+ (counted up to 1000)`` when more rows are due."""
    if not report.due_backlog_capped:
        return str(report.due_backlog)
    return f"{report.due_backlog}+ (counted up to {report.due_backlog_limit})"


def render(report: StatusReport, file: IO[str] | None = None) -> None:
    """Print the report: styled on a terminal, plain text otherwise (same columns)."""
    console, terminal = console_for(file if file is not None else sys.stdout)
    console.print(
        f"database time {iso(report.now_ms)}   due backlog {_backlog(report)}",
        markup=False,
    )
    if report.schedules:
        print_schedules(console, report.schedules, report.now_ms, terminal=terminal)
        if report.schedules_more:
            console.print(
                f"showing the first {len(report.schedules):,} triggers; there are more:"
                " `qlsched status --all` shows every one (or /v1/schedules, page by page)"
            )
    else:
        console.print("no triggers published (qlsched publish FILE.toml)", markup=False)
    controls = control_lines(report)
    if controls:
        console.print("pause and control actions:", markup=False)
        for line in controls:
            console.print(line, markup=False)
    for refused in report.refused:
        console.print(
            f"cannot admit {refused.project_id}/{refused.trigger_id} until it is re-published:"
            f" {shown(refused.reason)}",
            style="bold red" if terminal else None,
            markup=False,
        )
    for row in report.failing:
        at = "" if row.last_failure_at_ms is None else f" at {iso(row.last_failure_at_ms)}"
        console.print(
            f"{'stuck' if row.stuck else 'failing'} {row.project_id}/{row.trigger_id}:"
            f" {row.failures} admits failed in a row, last {row.last_failure}{at}"
            " (each gave its claim back; the next admit clears it)",
            style="bold red" if terminal and row.stuck else None,
            markup=False,
        )
    for q in report.requests:
        console.print(request_line(q), markup=False)
    for line in outcome_lines(report):
        console.print(line, markup=False)
    if report.retention is not None:
        console.print(setting_line(report.retention), markup=False)
        if report.pruned.runs:
            console.print(f"  {pruned_line(report.pruned)}", markup=False)
    console.print("recent runs:" if report.recent_runs else "recent runs: none", markup=False)
    for r in report.recent_runs:
        console.print(recent_run_line(r), markup=False)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_database_options(p, role="observer")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--all", action="store_true", help="every trigger (default: the first 1000)")


def main(args: argparse.Namespace) -> int:
    async def body(dsn: str) -> int:
        async def fn(conn: Connection) -> StatusReport:
            require(await read_login(conn, OBSERVER), command="status", role=OBSERVER)
            return await read_status(conn, limit=None if args.all else STATUS_LIMIT)

        report = await connect_once(dsn, fn)
        if args.json:
            print(msgspec.json.encode(report).decode())
        else:
            render(report)
        return 0

    async def configured() -> int:
        # The file is read (a missing one is bad input, exit 2, as for run and check), and a
        # DSN given anywhere, even empty, is validated: never a silent fall-back to the local
        # database.
        config = load_config(
            file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
        )
        return await body(
            config.dsn
            or await local_dsn("status", args.data_dir, args.pg_bindir, "qlsched_observer")
        )

    return run_command("status", configured)
