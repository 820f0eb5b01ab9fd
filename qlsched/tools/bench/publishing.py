"""Publish phase: the product's publish over a large file, then the same file again.

The file holds one project, ``PUBLISH_TASKS`` tasks and N triggers spread over them (every
minute, the zones and policies varied so the digests differ). It is published into the
emptied bench database (every trigger ``added``), then again unchanged (every trigger
``unchanged``, nothing written), each timed around ``publish`` alone on the superuser's
connection: the file is decoded and validated before, as the command does.
"""

from __future__ import annotations

import time

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.pool import Connection
from qlsched.postgres.publish import publish
from qlsched.tools import bench_data
from qlsched.tools.bench.results import PublishCost
from qlsched.tools.bench.session import BenchSession

PUBLISH_PROJECT = "bench-publish"
PUBLISH_TASKS = 100
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")


def publish_file(triggers: int, *, cron: str | None = None) -> PublishFile:
    """The large file; ``cron`` for every trigger instead of the spread hourly ones."""
    tasks = [
        TaskEntry(project=PUBLISH_PROJECT, id=f"task{k:03d}", command=f"echo {k}")
        for k in range(PUBLISH_TASKS)
    ]
    return PublishFile(
        projects=[ProjectEntry(id=PUBLISH_PROJECT)],
        tasks=tasks,
        triggers=[
            TriggerEntry(
                project=PUBLISH_PROJECT,
                id=f"p{i:07d}",
                task=tasks[i % PUBLISH_TASKS].id,
                cron=cron or f"{i % 60} * * * *",
                timezone=ZONES[i % len(ZONES)],
                misfire="fire_once" if i % 2 else "skip",
            )
            for i in range(triggers)
        ],
    )


async def publish_cost(session: BenchSession) -> PublishCost:
    count = session.options.publish_triggers
    spec = publish_file(count)
    session.note(f"publish: {count:,} triggers over {PUBLISH_TASKS} tasks")
    await session.call(bench_data.reset)

    async def timed(conn: Connection) -> tuple[float, dict[str, int]]:
        started = time.perf_counter()
        result = await publish(conn, spec)
        spent = time.perf_counter() - started
        tally: dict[str, int] = {}
        for change in result.triggers.values():
            tally[change] = tally.get(change, 0) + 1
        return spent, tally

    added_s, added = await session.call(timed)
    session.note(f"publish: {count:,} triggers published in {added_s:.2f} s ({added})")
    unchanged_s, unchanged = await session.call(timed)
    session.note(f"publish: again unchanged in {unchanged_s:.2f} s ({unchanged})")
    await session.call(bench_data.reset)
    return PublishCost(
        triggers=count,
        tasks=PUBLISH_TASKS,
        added_s=round(added_s, 3),
        unchanged_s=round(unchanged_s, 3),
        added=added.get("added", 0),
        unchanged=unchanged.get("unchanged", 0),
    )
