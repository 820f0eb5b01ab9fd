"""Publish-under-load phase: the steady load while a large file of new triggers lands.

The steady phase's triggers run as usual (``steady``); a moment into its window the
product's publish writes ``--publish`` new triggers (yearly crons, so none is due: all the
new rows need is their Initialize). The claim shares its budget between uninitialised and
due rows, so the figure to watch is the existing triggers' lag and misses while the new
rows initialise: p99 within cadence + 250 ms and nothing skipped or coalesced.
"""

from __future__ import annotations

import time

from qlsched.postgres.pool import Connection
from qlsched.postgres.publish import publish
from qlsched.tools import bench_data
from qlsched.tools.bench.publishing import PUBLISH_PROJECT, publish_file
from qlsched.tools.bench.results import PublishUnderLoad
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench.steady import steady
from qlsched.tools.bench_data import PROJECT
from qlsched.tools.queries import tool_query

YEARLY = "0 0 1 1 *"


async def publish_under_load(session: BenchSession) -> PublishUnderLoad:
    count = session.options.publish_triggers
    spec = publish_file(count, cron=YEARLY)
    spent: list[float] = []
    await session.call(bench_data.reset)

    async def missed(conn: Connection) -> int:
        return int(await conn.fetchval(tool_query("bench_missed_totals"), PROJECT))

    async def land() -> None:
        session.note(f"publish_load: publishing {count:,} new triggers under the steady load")

        async def write(conn: Connection) -> None:
            started = time.perf_counter()
            await publish(conn, spec)
            spent.append(time.perf_counter() - started)

        await session.call(write)
        session.note(f"publish_load: published in {spent[0]:.2f} s")

    result = await steady(session, during=land)

    async def initialised(conn: Connection) -> int:
        return int(await conn.fetchval(tool_query("bench_initialised"), PUBLISH_PROJECT))

    done = await session.call(initialised)
    lost = await session.call(missed)
    session.note(
        f"publish_load: {done:,} of {count:,} new rows initialised; existing triggers' lag"
        f" p99 {result.lag_ms.p99} ms, {lost} occurrences skipped or coalesced"
    )
    await session.call(bench_data.reset)
    return PublishUnderLoad(
        steady=result,
        published=count,
        publish_s=round(spent[0], 3) if spent else float("nan"),
        initialised=done,
        missed=lost,
    )
