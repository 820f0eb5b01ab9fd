"""``qlsched status``: per trigger its zone, next fire time, claim holder and lease left, lag,
skipped and coalesced counts; the pause state, paused_total and last control actions of
the triggers that have any; recent runs. Observer DSN; ``--json`` for scripts.

Tables come from rich: boxed and bold on a terminal, plain whitespace-aligned columns with
no escape codes when stdout is a pipe or a file. ``--json`` prints one object whose
``now_ms`` (the database's clock) is given once, at the top level.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import IO

import msgspec
from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table

from qlsched.commands._common import run_command
from qlsched.commands._local import local_dsn
from qlsched.core.control import ScheduleAction
from qlsched.core.cron import dst_policy_label
from qlsched.core.shown import shown
from qlsched.core.store import ScheduleRow
from qlsched.postgres.login import OBSERVER, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.status import STATUS_LIMIT, StatusReport, StatusRequest, read_status
from qlsched.settings import load_config


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _iso_s(ms: int | None) -> str:
    """An occurrence's time: whole seconds (cron occurrences have no milliseconds)."""
    return "-" if ms is None else _iso(ms)[:19]


_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("TRIGGER", "left"),
    ("CRON", "left"),
    ("ZONE", "left"),
    ("NEXT FIRE (UTC)", "left"),
    ("LAG", "right"),
    ("CLAIM", "left"),
    ("LEASE", "right"),
    ("SKIP", "right"),
    ("COAL", "right"),
)


def _marker(s: ScheduleRow) -> str:
    if s.paused_at_ms is not None:
        return " (paused)"
    return "" if s.active else " (off)"


def _action_text(a: ScheduleAction) -> str:
    who = shown(a.actor) if a.actor_label is None else f"{shown(a.actor)} ({shown(a.actor_label)})"
    return f"{a.kind} {_iso(a.at_ms)} by {who}"


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
            parts.append(f"paused since {_iso(s.paused_at_ms)}{note};")
        parts.append(f"paused_total {s.paused_total};")
        if s.actions:
            parts.append("last actions: " + ", ".join(_action_text(a) for a in s.actions))
        lines.append("  " + " ".join(parts).rstrip(";"))
    return lines


def _schedules_table(report: StatusReport, *, terminal: bool) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD if terminal else None,
        header_style="bold" if terminal else "",
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    # On a narrow terminal cells fold onto more lines (a time's date above its clock):
    # never cropped or cut with an ellipsis, since a shortened time or count would be wrong.
    for name, justify in _COLUMNS:
        table.add_column(name, justify=justify, overflow="fold")
    now = report.now_ms
    for s in report.schedules:
        # Due at the cursor plus its jitter (docs/contract.md §11): lag counts from there.
        due = s.next_fire_at_ms if s.due_at_ms is None else s.due_at_ms
        lag = "-"
        if due is not None and due <= now and s.active:
            lag = f"{(now - due) / 1000:.1f}s"
        lease = "-"
        if s.claim_expires_at_ms is not None:
            lease = f"{max(0, s.claim_expires_at_ms - now) / 1000:.1f}s"
        table.add_row(
            f"{s.project_id}/{s.trigger_id}" + _marker(s),
            shown(s.cron),
            " ".join(filter(None, (shown(s.timezone), dst_policy_label(s.dst_gap, s.dst_fold)))),
            _iso_s(s.next_fire_at_ms) + (f" due {_iso(due)}" if s.jitter_ms else ""),
            lag,
            shown(s.claim_owner or None),
            lease,
            str(s.skipped_total),
            str(s.coalesced_total),
        )
    return table


def _backlog(report: StatusReport) -> str:
    """The bounded count: ``1000+ (counted up to 1000)`` when more rows are due."""
    if not report.due_backlog_capped:
        return str(report.due_backlog)
    return f"{report.due_backlog}+ (counted up to {report.due_backlog_limit})"


def _request_line(q: StatusRequest) -> str:
    """One request: what was asked, by whom, and how far it got."""
    line = f"request {q.kind} {q.project_id}/{q.trigger_id} {q.state}"
    if q.refused_reason is not None:
        line += f" ({shown(q.refused_reason)})"
    if q.kind == "backfill":
        line += (
            f" {q.done}/{q.total} (admitted {q.admitted}, already admitted"
            f" {q.already_admitted}) {_iso_s(q.from_ms)}..{_iso_s(q.to_ms)}"
        )
    line += f" by {shown(q.actor or q.requested_by)} at {_iso(q.created_at_ms)}"
    return line + (f" note {shown(q.note)}" if q.note else "")


def render(report: StatusReport, file: IO[str] | None = None) -> None:
    """Print the report: styled on a terminal, plain text otherwise (same columns)."""
    out = file if file is not None else sys.stdout
    terminal = out.isatty()
    # Off a terminal rich would wrap at 80 columns; a table of long ids must stay one line
    # per row for grep and awk, so the width is only a ceiling there.
    # No markup or emoji codes: a cell's text (an owner name) is shown, never interpreted.
    console = Console(
        file=out, highlight=False, markup=False, emoji=False, width=None if terminal else 1000
    )
    console.print(
        f"database time {_iso(report.now_ms)}   due backlog {_backlog(report)}",
        markup=False,
    )
    if report.schedules:
        console.print(_schedules_table(report, terminal=terminal))
        if terminal:
            console.print(
                "SKIP: occurrences policy skip dropped, found past the grace. "
                "COAL: occurrences a late Fire passed over (either policy).",
                style="dim",
                markup=False,
            )
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
    for q in report.requests:
        console.print(_request_line(q), markup=False)
    console.print("recent runs:" if report.recent_runs else "recent runs: none", markup=False)
    for r in report.recent_runs:
        lag = "-" if r.queued_at_ms is None else f"{r.queued_at_ms - r.scheduled_for_ms} ms"
        console.print(
            f"  {r.project_id}/{r.trigger_id} for {_iso(r.scheduled_for_ms)} "
            f"{r.state} by {shown(r.admitted_by_owner)} (lag {lag})",
            markup=False,
        )


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
