"""The demo's live view: what the monitor reads from the database and shows once a second.

What the database decides: lag, lease expiry and takeovers are judged by the database
clock in the rows the monitor reads, never this process's clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import IO, TypeVar

import msgspec
import trio
from rich.console import Console
from rich.live import Live
from rich.text import Text

from qlsched.postgres.pool import Connection, Database
from qlsched.tools.demo.plan import MONITOR_PERIOD_S, Plan
from qlsched.tools.demo.replicas import DemoFleet, DemoReplica
from qlsched.tools.demo.text import clock
from qlsched.tools.fleet import check_alive
from qlsched.tools.verify import (
    RunSighting,
    ScheduleState,
    TriggerRef,
    read_schedule_states,
    run_for_occurrence,
    runs_by_owner,
)

T = TypeVar("T")


class Screen:
    """Progress on stdout: a small table redrawn in place on a terminal (rich's ``Live``),
    plain lines otherwise. ``Live`` is refreshed only when the monitor draws (no thread of
    its own), and lines that stay (events) are printed above it."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._console = Console(file=stream, highlight=False)
        self._live: Live | None = None

    def note(self, text: str) -> None:
        """A line that stays (events), printed above the live table."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def live(self, lines: list[str], plain: str) -> None:
        if not self.tty:
            print(plain, file=self.stream, flush=True)
            return
        table = Text("\n".join(lines))
        if self._live is None:
            self._live = Live(
                table,
                console=self._console,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
        else:
            self._live.update(table, refresh=True)

    def done(self) -> None:
        """Stop redrawing; the last table stays on screen."""
        if self._live is not None:
            self._live.stop()
            self._live = None


class Fate(msgspec.Struct, frozen=True):
    """What became of a claim the killed replica held."""

    taken_over: bool
    """A survivor claimed the row after the lease expired."""
    settled: bool
    """Nothing about it can change any more (a Run exists, or the cursor moved on)."""
    text: str


LOCKED = Fate(taken_over=False, settled=False, text="locked until its lease expires")


@dataclass
class Held:
    """A claim the killed replica held when it died."""

    state: ScheduleState
    """The row as read at the kill: the victim's fence, the cursor it was to decide."""
    claimed_by: str | None = None
    """The first owner seen on the row under a newer claim (the monitor's 100 ms reads)."""
    fate: Fate = field(default_factory=lambda: LOCKED)


@dataclass
class Window:
    """What the monitor has seen so far (shared by the monitor and the killer tasks)."""

    plan: Plan
    fleet: DemoFleet
    screen: Screen
    db: Database
    start: float = 0.0
    states: list[ScheduleState] = field(default_factory=list)
    first_cursors: dict[TriggerRef, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    victim: DemoReplica | None = None
    held: dict[TriggerRef, Held] = field(default_factory=dict)

    def elapsed(self) -> float:
        return trio.current_time() - self.start

    def observe(self, states: list[ScheduleState]) -> None:
        self.states = states
        for s in states:
            ref = (s.project_id, s.trigger_id)
            if s.next_fire_at_ms is not None:
                self.first_cursors.setdefault(ref, s.next_fire_at_ms)
            held = self.held.get(ref)
            if (
                held is not None
                and held.claimed_by is None
                and s.claim_owner is not None
                and s.claim_version > held.state.claim_version
            ):
                held.claimed_by = s.claim_owner

    def lag_ms(self) -> int:
        due = [
            s.now_ms - s.next_fire_at_ms
            for s in self.states
            if s.active and s.next_fire_at_ms is not None and s.next_fire_at_ms <= s.now_ms
        ]
        return max(due, default=0)

    def takeovers(self) -> int:
        return sum(1 for h in self.held.values() if h.fate.taken_over)

    def render(self) -> None:
        t = self.elapsed()
        lag = self.lag_ms() / 1000
        takeover = "-"
        if self.victim is not None:
            takeover = f"{self.takeovers()} of {len(self.held)} held claims"
        parts: list[str] = []
        rows: list[str] = []
        for r in self.fleet.replicas:
            count = self.runs.get(r.name, 0)
            if r.killed_at_s is not None:
                state, mark = f"KILLED at {r.killed_at_s:.1f} s", " (killed)"
            elif r.alive():
                state, mark = "running", ""
            else:
                state, mark = f"exited ({r.proc.returncode})", " (exited)"
            parts.append(f"{r.name} {count}{mark}")
            http = f"  {r.http}/metrics" if r.http and r.alive() else ""
            rows.append(f"  {r.name:<12} {count:>6}   {state}{http}")
        total = sum(self.runs.values())
        head = (
            f"  {t:5.1f} s of {self.plan.seconds}   runs {total}   lag {lag:.1f} s   "
            f"takeovers {takeover}"
        )
        self.screen.live(
            [head, f"  {'replica':<12} {'runs':>6}   state", *rows],
            f"[{t:5.1f}s] runs: {' | '.join(parts)} | takeovers {takeover} | lag {lag:.1f}s",
        )


async def read(db: Database, fn: Callable[[Connection], Awaitable[T]]) -> T:
    return await db.run(fn)


async def monitor(w: Window, until: float) -> None:
    """Poll the schedule rows every 100 ms (first cursors, takeovers), render once a second,
    and notice a replica that dies by itself."""
    next_render = w.start
    while True:
        w.observe(await read(w.db, read_schedule_states))
        check_alive([r for r in w.fleet.replicas if r.killed_at_s is None])
        now = trio.current_time()
        if now >= next_render:
            w.runs = await read(w.db, runs_by_owner)
            await follow(w)
            w.render()
            next_render += 1.0
        if now >= until:
            return
        await trio.sleep(min(MONITOR_PERIOD_S, max(0.0, until - now)))


async def run_at(db: Database, ref: TriggerRef, at_ms: int) -> RunSighting | None:
    async def fn(conn: Connection) -> RunSighting | None:
        return await run_for_occurrence(conn, ref[0], ref[1], at_ms)

    return await db.run(fn)


async def follow(w: Window) -> None:
    """Update the fate of each held claim not yet settled, from the rows last read and the
    Run (if any) at the cursor the victim was to decide. The cursor moves in the same
    transaction that inserts a Run, so a row read *before* the Run that shows the cursor
    moved with no Run at it means the occurrence was skipped."""
    if w.victim is None:
        return
    rows = {(s.project_id, s.trigger_id): s for s in w.states}
    for ref, held in w.held.items():
        if held.fate.settled:
            continue
        cursor = held.state.next_fire_at_ms or 0
        row = rows.get(ref)
        run = await run_at(w.db, ref, cursor)
        taker = held.claimed_by or "a survivor"
        if run is not None and run.admitted_by_owner == w.victim.name:
            held.fate = Fate(
                taken_over=False,
                settled=True,
                text="its admit had reached the server before the kill and committed",
            )
        elif run is not None:
            late_s = ((run.queued_at_ms or cursor) - cursor) / 1000
            held.fate = Fate(
                taken_over=True,
                settled=True,
                text=f"taken over: {run.admitted_by_owner} admitted the {clock(cursor)} "
                f"occurrence {late_s:.1f} s after it was due (the lease had to expire first)",
            )
        elif row is not None and row.next_fire_at_ms != cursor:
            held.fate = Fate(
                taken_over=True,
                settled=True,
                text=f"taken over by {taker}: found too late, the {clock(cursor)} occurrence "
                "was skipped by its misfire policy (counted)",
            )
        elif row is not None and row.claim_version > held.state.claim_version:
            held.fate = Fate(taken_over=True, settled=False, text=f"claimed by {taker}")
        else:
            held.fate = Fate(
                taken_over=False,
                settled=False,
                text="still locked: its lease had not expired when the demo ended",
            )
