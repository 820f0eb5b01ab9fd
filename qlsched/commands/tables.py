"""What ``status`` and ``edge status`` print alike: times, the schedules table (rich), the
requests' and recent Runs' lines. Imports rich and ``core`` only, so the Edge's status
shares it without loading anything of PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import IO, Protocol

from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table

from qlsched.core.cron import dst_policy_label
from qlsched.core.requests import RequestView
from qlsched.core.shown import shown
from qlsched.core.store import ScheduleRow


def iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def iso_s(ms: int | None) -> str:
    """An occurrence's time: whole seconds (cron occurrences have no milliseconds)."""
    return "-" if ms is None else iso(ms)[:19]


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


def marker(s: ScheduleRow) -> str:
    if s.paused_at_ms is not None:
        return " (paused)"
    return "" if s.active else " (off)"


def schedules_table(schedules: Sequence[ScheduleRow], now_ms: int, *, terminal: bool) -> Table:
    """The schedules as ``status`` and ``edge status`` show them: boxed and bold on a
    terminal, plain aligned columns otherwise; the lag counts from the due time. An Edge
    row has no claim holder and no lease (``-``)."""
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
    now = now_ms
    for s in schedules:
        # Due at the cursor plus its jitter (docs/contract.md §11): lag counts from there.
        due = s.next_fire_at_ms if s.due_at_ms is None else s.due_at_ms
        lag = "-"
        if due is not None and due <= now and s.active:
            lag = f"{(now - due) / 1000:.1f}s"
        lease = "-"
        if s.claim_expires_at_ms is not None:
            lease = f"{max(0, s.claim_expires_at_ms - now) / 1000:.1f}s"
        table.add_row(
            f"{s.project_id}/{s.trigger_id}" + marker(s),
            shown(s.cron),
            " ".join(filter(None, (shown(s.timezone), dst_policy_label(s.dst_gap, s.dst_fold)))),
            iso_s(s.next_fire_at_ms) + (f" due {iso(due)}" if s.jitter_ms else ""),
            lag,
            shown(s.claim_owner or None),
            lease,
            str(s.skipped_total),
            str(s.coalesced_total),
        )
    return table


class RecentRunRow(Protocol):
    """A recent Run as both profiles' status reads it."""

    @property
    def project_id(self) -> str: ...
    @property
    def trigger_id(self) -> str: ...
    @property
    def scheduled_for_ms(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def queued_at_ms(self) -> int | None: ...
    @property
    def admitted_by_owner(self) -> str: ...


def recent_run_line(r: RecentRunRow) -> str:
    lag = "-" if r.queued_at_ms is None else f"{r.queued_at_ms - r.scheduled_for_ms} ms"
    return (
        f"  {r.project_id}/{r.trigger_id} for {iso(r.scheduled_for_ms)} "
        f"{r.state} by {shown(r.admitted_by_owner)} (lag {lag})"
    )


def request_line(q: RequestView) -> str:
    """One request: what was asked, by whom, and how far it got."""
    state = "held (trigger paused; runs after resume)" if q.held else q.state
    line = f"request {q.kind} {q.project_id}/{q.trigger_id} {state}"
    if q.refused_reason is not None:
        line += f" ({shown(q.refused_reason)})"
    if q.failures and q.last_failure is not None:
        line += f" (failed {q.failures} in a row, last {q.last_failure})"
    if q.kind == "backfill":
        line += (
            f" {q.done}/{q.total} (admitted {q.admitted}, already admitted"
            f" {q.already_admitted}"
            + (f", overlap-skipped {q.overlap_skipped}" if q.overlap_skipped else "")
            + f") {iso_s(q.from_ms)}..{iso_s(q.to_ms)}"
        )
    elif q.overlap_skipped:
        line += " (overlap-skipped: a Run of the trigger was unfinished)"
    line += f" by {shown(q.actor or q.requested_by)} at {iso(q.created_at_ms)}"
    return line + (f" note {shown(q.note)}" if q.note else "")


def console_for(out: IO[str]) -> tuple[Console, bool]:
    """A console on ``out`` and whether it is a terminal. Off a terminal rich would wrap at
    80 columns; a table of long ids must stay one line per row for grep and awk, so the
    width is only a ceiling there."""
    terminal = out.isatty()
    # No markup or emoji codes: a cell's text (an owner name) is shown, never interpreted.
    console = Console(
        file=out, highlight=False, markup=False, emoji=False, width=None if terminal else 1000
    )
    return console, terminal


def overlap_line(s: ScheduleRow) -> str:
    """What the trigger's overlap policy and start deadline did (docs/contract.md §13)."""
    return (
        f"{s.project_id}/{s.trigger_id}: {s.overlap_skipped_total} occurrences overlap-skipped"
        f" (a Run of it was unfinished), {s.deadline_cancelled_total} Runs cancelled at their"
        " start deadline"
    )


def print_schedules(
    console: Console, rows: Sequence[ScheduleRow], now_ms: int, *, terminal: bool
) -> None:
    """The schedules table, its legend on a terminal, and a line for each trigger whose
    overlap policy or start deadline acted (``status`` and ``edge status`` alike)."""
    console.print(schedules_table(rows, now_ms, terminal=terminal))
    if terminal:
        console.print(
            "SKIP: occurrences policy skip dropped, found past the grace. "
            "COAL: occurrences a late Fire passed over (either policy).",
            style="dim",
            markup=False,
        )
    for s in rows:
        if s.overlap_skipped_total or s.deadline_cancelled_total:
            console.print(overlap_line(s), markup=False)
