"""One bench run's shared state: its options, its database, its replicas, its progress line.

The phases (``drain``, ``steady``, ``ceiling``, ``scale``) each take a ``BenchSession`` and
return their result; they run one after another, each on a freshly emptied database, so no
phase sees another's rows, replicas or connections.

Ownership: the session owns nothing it must close. The superuser pool, the fleet and the
work directory belong to ``runner.run_bench`` and the ``bench`` command, which close them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec
import trio

from qlsched.postgres.pool import Connection, Database
from qlsched.tools import bench_data
from qlsched.tools.audit import AuditReport, audit_exactly_once
from qlsched.tools.bench.replicas import (
    WARM_TIMEOUT_S,
    Fleet,
    Replica,
    ReplicaSettings,
    metrics,
    stop,
    wait_started,
    wait_warm,
)
from qlsched.tools.bench.results import Lag
from qlsched.tools.bench.window_results import WindowCounts

T = TypeVar("T")

RUNTIME_ROLE = "qlsched_runtime"
ADMIT_STATEMENTS_METRIC = "qlsched_admit_statements_total"
ADMIT_RETRIES_METRIC = "qlsched_admit_serialization_retries_total"
SESSIONS_GONE_TIMEOUT_S = 15.0


class BenchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Sizes and settings of one run (``options_for`` derives them from the flags)."""

    triggers: int
    replicas: int
    seconds: int
    quick: bool
    replica: ReplicaSettings
    claim_limit: int
    """Rows per claim statement in the latency measurement (k)."""
    claim_repetitions: int
    scale_rows: tuple[int, ...]
    rss_rounds: int
    """Rounds a replica runs over the table before its RSS is read."""
    ceiling_seconds: int
    pgbench_clients: tuple[int, ...]
    """pgbench runs, one per client count; the ceiling is the best."""
    decision_rounds: int = 20
    """Timed rounds of 256 decisions a year late (costs phase)."""
    readiness_checks: int = 10
    recovery_history: int = 10_000_000
    """Terminal Attempts in the history recovery is timed over."""
    recovery_calls: int = 10
    publish_triggers: int = 100_000
    """Triggers in the file the publish phase publishes twice."""
    observe_triggers: int = 1_000_000
    """Triggers the observe phase adds to the costs phase's history."""
    observe_calls: int = 30
    """Timed calls of each read in the observe phase."""
    scale: bool = False
    """``--scale``: also the million-trigger burst and the 100,000-trigger steady load."""
    big_burst_triggers: int = 1_000_000
    big_steady_triggers: int = 100_000
    big_steady_seconds: int = 60
    retention_history: int = 1_000_000
    """Finished Runs the retention phase prunes over (``--retention-history``; the issue's
    figure, to run once, is 10,000,000)."""
    retention_only: bool = False
    """``--retention-only``: the retention phase alone."""


BENCH_REPLICA = ReplicaSettings(
    claim_budget=256, cadence_ms=100, lease_ms=30_000, stop_timeout_ms=2_000
)
"""The replicas' flags: the hard-cap claim budget (a burst is drained in the fewest rounds,
each one batch admit), a 100 ms cadence (a due row waits at most that long for a round), the
default 30 s lease (above the runtime role's 5 s timeouts, which readiness requires)."""


def options_for(
    *,
    triggers: int,
    replicas: int,
    seconds: int,
    quick: bool,
    scale: bool = False,
    retention_history: int | None = None,
    retention_only: bool = False,
) -> BenchOptions:
    """The run's options. ``quick``: at most 1,000 triggers and 5 s, 1k/10k schedule rows,
    fewer repetitions: a smoke run in under a minute (with ``scale``, the phases at scale
    at small sizes too). ``retention_history`` overrides the phase's size (None: 1,000,000,
    50,000 with ``quick``)."""
    options = _options_for(triggers=triggers, replicas=replicas, seconds=seconds, quick=quick)
    history = retention_history or (50_000 if quick else options.retention_history)
    return msgspec.structs.replace(
        options, scale=scale, retention_history=history, retention_only=retention_only
    )


def _options_for(*, triggers: int, replicas: int, seconds: int, quick: bool) -> BenchOptions:
    if quick:
        return BenchOptions(
            triggers=min(triggers, 1_000),
            replicas=replicas,
            seconds=min(seconds, 5),
            quick=True,
            replica=BENCH_REPLICA,
            claim_limit=16,
            claim_repetitions=200,
            scale_rows=(1_000, 10_000),
            rss_rounds=15,
            ceiling_seconds=3,
            pgbench_clients=(replicas,),
            decision_rounds=4,
            readiness_checks=3,
            recovery_history=100_000,
            recovery_calls=3,
            publish_triggers=2_000,
            observe_triggers=5_000,
            observe_calls=5,
            big_burst_triggers=5_000,
            big_steady_triggers=2_000,
            big_steady_seconds=5,
        )
    return BenchOptions(
        triggers=triggers,
        replicas=replicas,
        seconds=seconds,
        quick=False,
        replica=BENCH_REPLICA,
        claim_limit=16,
        claim_repetitions=1_000,
        scale_rows=(1_000, 100_000, 1_000_000),
        rss_rounds=60,
        ceiling_seconds=10,
        # The same concurrency: in a drain a replica has one statement in flight at a time
        # (its round claims, then admits): one pgbench client per replica; and two per
        # replica, its claim and admit pools both busy. The better run is the ceiling.
        pgbench_clients=(replicas, 2 * replicas),
    )


@dataclass
class BenchSession:
    options: BenchOptions
    db: Database
    """The superuser's pool on the bench database."""
    runtime_dsn: str
    observer_dsn: str
    worker_dsn: str
    fleet: Fleet
    workdir: Path
    pgbench: Path
    started: float

    async def call(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on the superuser's pool."""
        return await self.db.run(fn)

    def note(self, text: str) -> None:
        """A progress line on stderr."""
        elapsed = time.monotonic() - self.started
        print(f"qlsched bench [{elapsed:6.1f} s] {text}", file=sys.stderr, flush=True)

    async def start_replicas(self, count: int) -> list[Replica]:
        replicas = [self.fleet.spawn(self.runtime_dsn, self.options.replica) for _ in range(count)]
        await wait_started(replicas)
        return replicas

    async def start_warm_replicas(self, count: int) -> list[Replica]:
        """``start_replicas``, then until they are warm (``wait_warm``): what a measured
        drain or window starts from. A fleet still busy at the timeout is noted."""
        replicas = await self.start_replicas(count)
        if not await wait_warm(replicas):
            self.note(f"{count} replicas still busy {WARM_TIMEOUT_S:.0f} s after their start")
        return replicas

    async def stop_replicas(self, replicas: list[Replica]) -> list[str]:
        """Stop them in order, then wait until their database sessions are gone, so none
        outlives its phase (the next phase empties the database)."""
        problems = await stop(replicas, self.options.replica)

        async def sessions(conn: Connection) -> int:
            return await bench_data.sessions_of(conn, RUNTIME_ROLE)

        with trio.move_on_after(SESSIONS_GONE_TIMEOUT_S):
            # Polled: the server has no event for a session's end that we could wait on.
            while await self.call(sessions):  # noqa: ASYNC110
                await trio.sleep(0.05)
        return problems

    async def db_now_ms(self) -> int:
        return await self.call(bench_data.now_ms)

    async def admit_counts(self, replicas: list[Replica]) -> tuple[int, int]:
        """(serialization retries, admit statements) the replicas' stores have counted so
        far, summed over their ``/metrics`` (``qlsched_admit_serialization_retries_total``,
        ``qlsched_admit_statements_total``, cumulative per process). Read while they run; a
        phase takes the difference of a read before and a read after it."""
        retries = statements = 0
        for r in replicas:
            samples = await metrics(r)
            retries += int(samples.get(ADMIT_RETRIES_METRIC, 0))
            statements += int(samples.get(ADMIT_STATEMENTS_METRIC, 0))
        return retries, statements

    async def audit_window(
        self,
        window_ms: tuple[int, int],
        first_cursors: Mapping[tuple[str, str], int],
        *,
        triggers: int,
        expected: int,
    ) -> tuple[WindowCounts, Lag]:
        """What the Runs of the occurrences in ``[start, end)`` came to, audited exactly once
        from each trigger's first cursor (``verify``), and their lag: an expected occurrence
        with no Run in the window is lost, whatever the audit counted."""
        start, end = window_ms

        async def window(conn: Connection) -> bench_data.RunsWindow:
            return await bench_data.runs_window(conn, start, end - 1)

        w = await self.call(window)
        duplicates, lost, malformed = await self.verify(first_cursors)
        counts = WindowCounts(
            triggers=triggers,
            seconds=(end - start) // 1000,
            expected_occurrences=expected,
            occurrences=w.runs,
            duplicates=duplicates,
            lost=max(lost, expected - (w.runs - duplicates)),
            malformed=malformed,
        )
        return counts, Lag(w.lag_p50_ms, w.lag_p95_ms, w.lag_p99_ms, w.lag_max_ms)

    async def verify(self, first_cursors: Mapping[tuple[str, str], int]) -> tuple[int, int, int]:
        """(duplicates, lost, malformed) by ``audit_exactly_once`` over the whole database
        (set-based: counts come back, not the Runs); a sample of what it found is noted."""

        async def fn(conn: Connection) -> AuditReport:
            return await audit_exactly_once(conn, first_cursors=first_cursors)

        started = time.monotonic()
        report = await self.call(fn)
        self.note(f"audit: {report.runs:,} Runs in {time.monotonic() - started:.1f} s")
        if not report.ok:
            self.note(
                f"audit: samples: duplicates {report.duplicate_sample}, lost "
                f"{report.lost_sample}, unexpected {report.unexpected_sample}, malformed "
                f"{report.malformed_sample}"
            )
        return report.duplicates, report.lost, report.malformed
