"""Drain phases: N occurrences due at one instant, admitted by R replica processes.

* ``burst``: N triggers ``0 0 1 1 *`` (misfire ``fire_once``, the largest grace), whose
  cursors all move, in one statement, to the same past occurrence (this year's 1 January):
  a backlog due at once, each trigger admitted exactly once.
* ``same_tick``: N triggers sharing one live cron tick (``*/5 * * * * *``, every 5 s): their
  cursors move to the next tick at least a second ahead, and the rows fall due together by
  the database clock while the replicas poll: the top-of-the-minute case.

The replicas are started (and have run a few empty rounds) before the rows move, so their
start-up is not part of the figure. The rate is admitted occurrences over database time from
the first to the last queue time; the phase ends when every occurrence has a Run (or after a
timeout: the missing ones are then reported lost). Exactly once is audited by
``verify_exactly_once`` from each trigger's first cursor.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from qlsched.core.cron import next_after, parse_cron
from qlsched.postgres.pool import Connection
from qlsched.tools import bench_data
from qlsched.tools.bench.replicas import Replica
from qlsched.tools.bench.results import DrainResult, Lag, ratio
from qlsched.tools.bench.scale_results import Progress
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench_data import PROJECT, RunsWindow
from qlsched.tools.fleet import check_alive

YEARLY = "0 0 1 1 *"
TICK = "*/5 * * * * *"
TICK_LEAD_MS = 1_000
"""The shared tick is at least this far ahead when the cursors move to it."""
LARGEST_GRACE_MS = 86_400_000
PROGRESS_S = 2.0


def last_new_year_ms(now_ms: int) -> int:
    """This year's 1 January 00:00 UTC (the last year's within the first hour of a year)."""
    year = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).year
    instant = int(dt.datetime(year, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    if now_ms - instant < 3_600_000:
        instant = int(dt.datetime(year - 1, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    return instant


@dataclass(frozen=True)
class DrainHooks:
    """What a caller adds to a burst (the million-trigger one, ``hundredfold``)."""

    triggers: int | None = None
    """Instead of ``--triggers``."""
    loaded: Callable[[], Awaitable[None]] | None = None
    """Run after the rows are loaded, before the replicas start."""
    count: Callable[[list[Replica]], Awaitable[int]] | None = None
    """Runs admitted so far, instead of counting them in the database at every poll."""
    polled: Callable[[list[Replica], int], None] | None = None
    """Called with the admitted count just before the rows fall due and at every poll."""
    reuse_triggers: bool = False
    """Keep the triggers the previous phase loaded when they are these (``load_not_due``)."""
    poll_s: float = 0.1
    """How often the runs are counted: the rate is read from queue times, so polling only
    decides when the phase ends, and slower polling takes less from the measured server."""


async def burst(session: BenchSession, hooks: DrainHooks | None = None) -> DrainResult:
    return await _drain(session, same_tick=False, hooks=hooks or DrainHooks())


async def same_tick(session: BenchSession) -> DrainResult:
    return await _drain(session, same_tick=True, hooks=DrainHooks())


async def _drain(session: BenchSession, *, same_tick: bool, hooks: DrainHooks) -> DrainResult:
    o = session.options
    n = hooks.triggers or o.triggers
    label = "same tick" if same_tick else "burst"
    cron = TICK if same_tick else YEARLY
    misfire, grace = ("skip", 60_000) if same_tick else ("fire_once", LARGEST_GRACE_MS)
    session.note(f"{label}: loading {n:,} triggers ({cron!r}, misfire {misfire})")

    async def load(conn: Connection) -> bool:
        return await bench_data.load_not_due(
            conn, n, crons=[cron], misfire=misfire, grace_ms=grace, reuse=hooks.reuse_triggers
        )

    if await session.call(load):
        session.note(f"{label}: the previous phase's {n:,} triggers reused")
    if hooks.loaded is not None:
        await hooks.loaded()
    replicas = await session.start_warm_replicas(o.replicas)
    before = await session.admit_counts(replicas)
    cpu_before = _cpu(replicas)
    if hooks.polled is not None:
        hooks.polled(replicas, 0)
    now = await session.db_now_ms()
    at = next_after(parse_cron(cron), now + TICK_LEAD_MS) if same_tick else last_new_year_ms(now)

    async def move(conn: Connection) -> tuple[int, int]:
        moved = await bench_data.set_cursors(conn, [at])
        return moved, await bench_data.now_ms(conn)

    moved, moved_at = await session.call(move)
    due_ms = max(at, moved_at)
    when = f"tick in {(at - moved_at) / 1000:.1f} s" if same_tick else "due since 1 January"
    session.note(f"{label}: {moved:,} rows moved to one instant ({when}); {o.replicas} replicas")

    async def count(conn: Connection) -> int:
        return await bench_data.run_count(conn, at, at)

    async def admitted_so_far() -> int:
        if hooks.count is not None:
            return await hooks.count(replicas)
        return await session.call(count)

    timeout_s = max(60.0, n / 100) + max(0, at - moved_at) / 1000
    admitted = 0
    next_note = trio.current_time() + PROGRESS_S
    # Progress from when the rows fell due (the tick may still be ahead), for the charts.
    zero = trio.current_time() + max(0, at - moved_at) / 1000
    progress = Progress(seconds=[], admitted=[])
    with trio.move_on_after(timeout_s):
        while True:
            admitted = await admitted_so_far()
            progress.seconds.append(round(trio.current_time() - zero, 2))
            progress.admitted.append(admitted)
            if hooks.polled is not None:
                hooks.polled(replicas, admitted)
            if admitted >= n:
                break
            check_alive(replicas)
            if trio.current_time() >= next_note:
                session.note(f"{label}: {admitted:,} of {n:,} admitted")
                next_note += PROGRESS_S
            await trio.sleep(hooks.poll_s)
    if admitted < n:
        session.note(f"{label}: timed out after {timeout_s:.0f} s with {admitted:,} of {n:,}")
    cpu_spent = _cpu(replicas) - cpu_before
    after = await session.admit_counts(replicas)
    retries, statements = after[0] - before[0], after[1] - before[1]
    problems = await session.stop_replicas(replicas)

    async def window(conn: Connection) -> RunsWindow:
        return await bench_data.runs_window(conn, at, at)

    w = await session.call(window)
    first = {(PROJECT, bench_data.trigger_id(i)): at for i in range(1, n + 1)}
    duplicates, lost, malformed = await session.verify(first)
    # verify_exactly_once checks what was decided; an occurrence still undecided when the
    # phase ended (a timeout) has no Run either: lost, as far as this run can tell.
    lost = max(lost, n - (w.runs - duplicates))
    span_s = ((w.last_queued_ms or 0) - (w.first_queued_ms or 0)) / 1000
    rate = w.runs / span_s if span_s > 0 else None
    from_due = ((w.last_queued_ms or due_ms) - due_ms) / 1000 if w.runs else None
    diagnostics: dict[str, int] = {}
    for r in replicas:
        for code, k in r.diagnostic_codes().items():
            diagnostics[code] = diagnostics.get(code, 0) + k
    result = DrainResult(
        triggers=n,
        cron=cron,
        admitted=w.runs,
        occurrences_per_s=None if rate is None else round(rate, 1),
        seconds=round(span_s, 3),
        seconds_from_due=None if from_due is None else round(from_due, 3),
        duplicates=duplicates,
        lost=lost,
        malformed=malformed,
        ssi_retries=retries,
        admit_statements=statements,
        ssi_retry_ratio=ratio(retries, statements),
        lag_ms=Lag(w.lag_p50_ms, w.lag_p95_ms, w.lag_p99_ms, w.lag_max_ms) if same_tick else None,
        diagnostics=diagnostics,
        stop_problems=problems,
        replica_cpu_us_per_occurrence=(
            round(cpu_spent * 1e6 / w.runs, 1) if w.runs and cpu_spent > 0 else None
        ),
        progress=progress,
    )
    session.note(
        f"{label}: {w.runs:,} admitted in {span_s:.2f} s = "
        + (f"{rate:,.0f}/s" if rate else "n/a")
        + f"; duplicates {duplicates}, lost {lost}; SSI retries {retries}/{statements}; "
        f"replica CPU {cpu_spent:.2f} s"
    )
    return result


def _cpu(replicas: list[Replica]) -> float:
    """CPU seconds the replicas have used so far, summed (a gone one counts nothing)."""
    return sum(r.cpu_s() or 0.0 for r in replicas)
