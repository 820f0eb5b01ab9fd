"""A database outage under a running control: bounded reconnects, then recovery by itself.

docs/contract.md §6 and issue "Cluster control": repeated database errors back off (bounded; no busy
loop, at most one connection attempt per second per pool). The control reaches the server
through ``tests.support.pgproxy``, which counts every client connection it accepts; while
the server is down the proxy accepts and closes at once (its upstream socket is gone), so
every attempt the control makes is counted, and none is hidden by a connect timeout.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio_asyncio

from qlsched.cluster.root import open_cluster_control
from qlsched.embedded import open_embedded
from tests.support.faults import (
    control_config,
    create_gate_db,
    every_second_triggers,
    fetchval,
    open_su,
    poll,
    publish_triggers,
    report,
    seed_cursors,
    verify_end_state,
)
from tests.support.memory_sink import MemorySink
from tests.support.pgproxy import PgProxy, unix_socket_path

pytestmark = pytest.mark.slow

OUTAGE_S = 8.0
POOLS = 2
"""The control's pools: claim and admit (settle and recovery share them)."""
RUNS_SQL = "SELECT count(*) FROM qlsched.runs"


async def test_an_outage_backs_off_and_the_control_recovers_alone() -> None:
    """Rule: while PostgreSQL is down, a control tries at most one connection per second per
    pool (no busy loop), stays up, and admits again by itself once the server is back,
    exactly once.

    A control runs through the counting proxy until it has admitted Runs; the server is
    stopped in immediate mode for ``OUTAGE_S`` seconds of real time; the connections the
    proxy accepted in that time are at most ``POOLS * ceil(OUTAGE_S)``. A control that
    retried in a loop, or per task, makes hundreds. Then the server starts again and new
    Runs appear without any restart of the control; the window verifies exactly once.
    """
    with open_embedded() as server:
        async with trio_asyncio.open_loop():
            db = await create_gate_db(server, "outage")
            await publish_triggers(db, every_second_triggers(4))
            async with open_su(db.superuser_dsn) as su:
                baseline = await seed_cursors(su)
            proxy = PgProxy(unix_socket_path(server.socket_dir, server.port))
            sink = MemorySink(replica="outage")
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.serve)
                async with open_cluster_control(
                    control_config(proxy.dsn(db.name), "outage"), sink=sink
                ):
                    async with open_su(db.superuser_dsn) as su:

                        async def some_runs() -> bool:
                            return int(await fetchval(su, RUNS_SQL)) >= 4

                        await poll(some_runs, timeout_s=20)
                        before_outage = int(await fetchval(su, RUNS_SQL))

                    await trio.to_thread.run_sync(server.stop, "immediate")
                    accepted = proxy.connections
                    await trio.sleep(OUTAGE_S)
                    attempts = proxy.connections - accepted
                    await trio.to_thread.run_sync(server.start)

                    async with open_su(db.superuser_dsn) as su:

                        async def admitting_again() -> bool:
                            return int(await fetchval(su, RUNS_SQL)) > before_outage + 4

                        # Back-off is capped at 30 s; the next round after the outage comes
                        # within that cap, then the cadence is normal again.
                        await poll(admitting_again, timeout_s=45, interval_s=0.2)
                nursery.cancel_scope.cancel()

            failures = [d for d in sink.items if d.code == "round_failed"]
            assert failures, "the outage never reached the control"
            assert attempts <= POOLS * math.ceil(OUTAGE_S), attempts
            async with open_su(db.superuser_dsn) as su:
                verdict = await verify_end_state(su, baseline, owners=("outage",))
            assert verdict.problems == []
    report(
        f"outage gate: {attempts} connection attempts in {OUTAGE_S:.0f} s down"
        f" ({len(failures)} failed rounds); {verdict}"
    )
