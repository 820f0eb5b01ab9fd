"""On-time phase: every-second triggers at the replicas' default settings.

The other phases run the replicas tuned (``BENCH_REPLICA``: a 100 ms cadence, a budget of
256); a new user runs the defaults. Here ``ON_TIME_TRIGGERS`` every-second triggers run on
two replicas with ``qlsched run``'s default cadence, budget and lease for ``--seconds``, and
the lag of every occurrence in the window (admitted minus due, database time) is the
figure: a replica wakes when the next rows come within its lookahead (read with its
claim), claims and decides them ahead and admits them when due, so an occurrence should
wait milliseconds, not up to a cadence.
"""

from __future__ import annotations

import msgspec
import trio

from qlsched.core.config import Config
from qlsched.postgres.pool import Connection
from qlsched.tools import bench_data
from qlsched.tools.bench.replicas import ReplicaSettings
from qlsched.tools.bench.results import OnTimeResult
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench_data import PROJECT
from qlsched.tools.fleet import check_alive

ON_TIME_TRIGGERS = 1_000
ON_TIME_REPLICAS = 2
EVERY_SECOND = "* * * * * *"
LEAD_MS = 2_000
WARM_S = 2.0
DRAIN_TIMEOUT_S = 60.0
"""After the window, how long the replicas may take to admit its last occurrences."""
_DEFAULTS = Config(owner="bench")
DEFAULT_REPLICA = ReplicaSettings(
    claim_budget=_DEFAULTS.claim_budget,
    cadence_ms=_DEFAULTS.cadence_ms,
    lease_ms=_DEFAULTS.lease_ms,
    stop_timeout_ms=2_000,
)


async def on_time(
    session: BenchSession,
    *,
    triggers: int = ON_TIME_TRIGGERS,
    burst_per_s: float | None = None,
) -> OnTimeResult:
    """The phase; ``burst_per_s``: the same run's burst drain, this machine's floor."""
    base = session.options
    n = min(triggers, base.triggers) if base.quick else triggers
    seconds = base.seconds
    session.options = msgspec.structs.replace(base, replica=DEFAULT_REPLICA)
    try:
        session.note(
            f"on_time: {n:,} every-second triggers, {ON_TIME_REPLICAS} replicas at the default"
            f" settings (cadence {DEFAULT_REPLICA.cadence_ms} ms, budget"
            f" {DEFAULT_REPLICA.claim_budget} growing to {_DEFAULTS.catch_up_budget},"
            f" lookahead {_DEFAULTS.lookahead_ms} ms), {seconds} s"
        )

        async def load(conn: Connection) -> None:
            await bench_data.load_not_due(
                conn, n, crons=[EVERY_SECOND], misfire="skip", grace_ms=60_000
            )

        await session.call(load)
        replicas = await session.start_replicas(ON_TIME_REPLICAS)
        await trio.sleep(WARM_S)
        start = (await session.db_now_ms() + LEAD_MS) // 1000 * 1000
        end = start + seconds * 1000

        async def move(conn: Connection) -> int:
            return await bench_data.set_cursors(conn, [start])

        await session.call(move)
        now = await session.db_now_ms()
        await trio.sleep((end - now) / 1000)
        expected = n * seconds

        async def admitted(conn: Connection) -> int:
            return await bench_data.run_count(conn, start, end - 1)

        # The window's last occurrences are admitted before the replicas stop (their lag is
        # the figure, however long): a backlog cut at stop would read as lost.
        with trio.move_on_after(DRAIN_TIMEOUT_S):
            while await session.call(admitted) < expected:
                check_alive(replicas)
                await trio.sleep(0.2)
        problems = await session.stop_replicas(replicas)
        first = {(PROJECT, bench_data.trigger_id(i)): start for i in range(1, n + 1)}
        counts, lag = await session.audit_window((start, end), first, triggers=n, expected=expected)
    finally:
        session.options = base
    session.note(
        f"on_time: {counts.occurrences:,} of {expected:,}; lag from due p50 {lag.p50} ms, p99"
        f" {lag.p99} ms; duplicates {counts.duplicates}, lost {counts.lost}"
    )
    return OnTimeResult(
        **msgspec.structs.asdict(counts),
        replicas=ON_TIME_REPLICAS,
        cadence_ms=DEFAULT_REPLICA.cadence_ms,
        claim_budget=DEFAULT_REPLICA.claim_budget,
        catch_up_budget=_DEFAULTS.catch_up_budget,
        lookahead_ms=_DEFAULTS.lookahead_ms,
        lag_ms=lag,
        stop_problems=problems,
        burst_per_s=burst_per_s if base.replicas == ON_TIME_REPLICAS else None,
    )
