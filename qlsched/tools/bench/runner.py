"""One bench run, start to end: the phases in order, then the report.

Order: burst drain, the pgbench ceiling right after it (same rows, same server state, so the
ratio compares like with like), the same-tick drain, the worker (no-op jobs per second),
steady, on_time (every-second triggers at the default settings), scale (claim latency at
each size and the replicas' RSS), publish (a large file, twice), publish_load (the steady
load while a large file of new triggers is published and initialised), then costs (a decision a year
late, readiness, recovery over a large history), observe (status, /metrics and
/v1/schedules over that history and a million triggers), retention (a prune batch over
a large history against the floor), and with ``--scale`` the
hundredfold phases (a million-trigger burst, 100,000 triggers steady). Each phase empties
the database first (observe reads the history costs leaves; the million-trigger burst
reuses observe's triggers). Each phase's wall time is in ``phase_seconds``.
The caller owns the database (``Target``), the fleet and the work directory; this module
opens and closes only the superuser pool it uses.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

import msgspec

from qlsched.postgres.pool import open_database
from qlsched.tools import bench_data
from qlsched.tools.bench import machine as machine_facts
from qlsched.tools.bench.ceiling import ceiling
from qlsched.tools.bench.costs import LIVE_ATTEMPTS, costs
from qlsched.tools.bench.drain import burst, same_tick
from qlsched.tools.bench.flood import CLIENTS as FLOOD_CLIENTS
from qlsched.tools.bench.hundredfold import (
    big_burst,
    big_steady,
    scale_exactly_once,
    scale_targets,
)
from qlsched.tools.bench.observe import observe, observe_targets
from qlsched.tools.bench.on_time import on_time
from qlsched.tools.bench.publish_load import publish_under_load
from qlsched.tools.bench.publishing import publish_cost
from qlsched.tools.bench.replicas import Fleet
from qlsched.tools.bench.results import BenchConfig, BenchReport, PostgresInfo, exactly_once
from qlsched.tools.bench.retention import retention_cost, retention_targets
from qlsched.tools.bench.retention_results import RetentionCost
from qlsched.tools.bench.scale import scale
from qlsched.tools.bench.scale_results import ScaleResult
from qlsched.tools.bench.session import BenchOptions, BenchSession
from qlsched.tools.bench.steady import steady
from qlsched.tools.bench.sweep import SweepReport, sweep
from qlsched.tools.bench.targets import on_time_targets, publish_load_targets, targets
from qlsched.tools.bench.worker import worker_throughput

T = TypeVar("T")


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where the bench runs: its own database (created by init-db), and how to reach it."""

    superuser_dsn: str
    """The bench database, as the superuser (loads, resets, measurements)."""
    runtime_dsn: str
    """The bench database, as ``qlsched_runtime`` (replicas, pgbench, claim timings)."""
    observer_dsn: str
    """The bench database, as ``qlsched_observer`` (status, in the observe phase)."""
    worker_dsn: str
    """The bench database, as ``qlsched_worker`` (the worker phase)."""
    embedded: bool
    pgbench: Path


async def run_bench(
    target: Target, options: BenchOptions, *, fleet: Fleet, workdir: Path
) -> BenchReport:
    started = time.monotonic()
    load_start = machine_facts.load()
    cpu_start = machine_facts.cpu_times()
    async with _session(target, options, fleet=fleet, workdir=workdir, started=started) as session:
        facts = await session.call(bench_data.server_facts)
        session.note(
            f"PostgreSQL {facts.version}; {options.triggers:,} triggers, {options.replicas} "
            f"replicas, {options.seconds} s" + (" (quick)" if options.quick else "")
        )
        phases: dict[str, float] = {}

        async def timed(name: str, phase: Awaitable[T]) -> T:
            t0 = time.monotonic()
            result = await phase
            phases[name] = round(time.monotonic() - t0, 1)
            session.note(f"{name}: phase took {phases[name]:.1f} s")
            return result

        drain = await timed("burst", burst(session))
        pair = await timed("ceiling", ceiling(session, drain.occurrences_per_s))
        tick = await timed("same_tick", same_tick(session))
        work = await timed("worker", worker_throughput(session))
        steady_result = await timed("steady", steady(session))
        steady_http = await timed("steady_http", steady(session, http_clients=FLOOD_CLIENTS))
        punctual = await timed("on_time", on_time(session, burst_per_s=drain.occurrences_per_s))
        claims, rss = await timed("scale", scale(session))
        published = await timed("publish", publish_cost(session))
        under_load = await timed("publish_load", publish_under_load(session))
        cost = await timed("costs", costs(session, keep_history=True))
        observed = await timed(
            "observe",
            observe(session, runs=cost.recovery.terminal_attempts + LIVE_ATTEMPTS),
        )
        big = None
        if options.scale:  # before retention: the big burst reuses observe's triggers
            big = ScaleResult(
                burst=await timed("scale_burst", big_burst(session, drain)),
                steady=await timed("scale_steady", big_steady(session)),
            )
        pruning = await timed("retention", retention_cost(session))
    return BenchReport(
        machine=machine_facts.machine(),
        load={"start": load_start, "end": machine_facts.load()},
        cpu=machine_facts.cpu_use(cpu_start, machine_facts.cpu_times()),
        postgres_version=facts.version,
        postgres=PostgresInfo(
            embedded=target.embedded,
            shared_buffers=facts.shared_buffers,
            fsync=facts.fsync,
            synchronous_commit=facts.synchronous_commit,
        ),
        config=BenchConfig(
            triggers=options.triggers,
            replicas=options.replicas,
            seconds=options.seconds,
            quick=options.quick,
            claim_budget=options.replica.claim_budget,
            cadence_ms=options.replica.cadence_ms,
            lease_ms=options.replica.lease_ms,
            claim_limit=options.claim_limit,
            pgbench_clients=list(options.pgbench_clients),
        ),
        drain=drain,
        drain_same_tick=tick,
        worker=work,
        steady=steady_result,
        steady_http=steady_http,
        claim_latency_us=claims,
        rss_mb={r.triggers: r.rss_mb for r in rss},
        rss=rss,
        ceiling=pair,
        targets=targets(
            drain=drain,
            same_tick=tick,
            steady=steady_result,
            claims=claims,
            claim_limit=options.claim_limit,
            rss=rss,
            ceiling=pair,
            costs=cost,
            publishing=published,
        )
        | publish_load_targets(under_load)
        | on_time_targets(punctual)
        | observe_targets(observed)
        | retention_targets(pruning)
        | ({} if big is None else scale_targets(big)),
        observe=observed,
        retention=pruning,
        scale=big,
        publish=published,
        publish_under_load=under_load,
        on_time=punctual,
        decision_cost=cost.decision,
        recovery_cost=cost.recovery,
        readiness_cost=cost.readiness,
        exactly_once=exactly_once(
            drain, tick, steady_result, steady_http, under_load.steady, punctual
        )
        and scale_exactly_once(big),
        seconds=round(time.monotonic() - started, 1),
        phase_seconds=phases,
    )


async def run_retention_bench(
    target: Target, options: BenchOptions, *, fleet: Fleet, workdir: Path
) -> RetentionCost:
    """``--retention-only``: the retention phase alone (no replicas)."""
    started = time.monotonic()
    async with _session(target, options, fleet=fleet, workdir=workdir, started=started) as session:
        facts = await session.call(bench_data.server_facts)
        session.note(
            f"PostgreSQL {facts.version}; retention over {options.retention_history:,} Runs"
        )
        return await retention_cost(session)


async def run_sweep_bench(
    target: Target, options: BenchOptions, counts: list[int], *, fleet: Fleet, workdir: Path
) -> SweepReport:
    """``--sweep``: the burst drain and its ceiling at each replica count (``sweep``)."""
    started = time.monotonic()
    async with _session(target, options, fleet=fleet, workdir=workdir, started=started) as session:
        facts = await session.call(bench_data.server_facts)
        session.note(f"PostgreSQL {facts.version}; sweep {counts} over {options.triggers:,}")
        return await sweep(session, counts, max_replicas=max(counts))


@contextlib.asynccontextmanager
async def _session(
    target: Target, options: BenchOptions, *, fleet: Fleet, workdir: Path, started: float
) -> AsyncIterator[BenchSession]:
    """A bench session on the target's superuser pool (opened here, closed on exit)."""
    async with open_database(
        target.superuser_dsn, max_size=2, application_name="qlsched-bench"
    ) as db:
        yield BenchSession(
            options=options,
            db=db,
            runtime_dsn=target.runtime_dsn,
            observer_dsn=target.observer_dsn,
            worker_dsn=target.worker_dsn,
            fleet=fleet,
            workdir=workdir,
            pgbench=target.pgbench,
            started=started,
        )
