"""Overlap and start deadline on real processes (docs/contract.md §13): two ``qlsched run``
replicas and, where named, a ``qlsched work`` worker, on every-second triggers whose job
outlasts the period. The database is sampled as the processes run; each sample is one
statement, so one committed state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio
import trio_asyncio

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.pool import Connection, Database, connect_once
from qlsched.postgres.publish import publish
from qlsched.tools.accounting import Accounting, account
from tests.support.faults import (
    PROJECT,
    ReplicaProcess,
    create_gate_db,
    db_now_ms,
    every_second_triggers,
    fetch,
    open_su,
    poll,
    running_replicas,
    seed_cursors,
)
from tests.worker.proc_support import WorkerProcess

pytestmark = pytest.mark.slow

WINDOW_S = 8.0
SAMPLE_SQL = """
SELECT trigger_id,
       count(*) FILTER (WHERE state IN ('queued', 'running'))::int AS active,
       count(*) FILTER (WHERE state = 'held')::int AS held
  FROM qlsched.runs GROUP BY trigger_id
"""


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


def _spec(command: str, **trigger: object) -> PublishFile:
    triggers = [
        msgspec.structs.replace(t, **trigger)
        for t in every_second_triggers(2, policies=[("fire_once", 60_000)])
    ]
    return PublishFile(
        projects=[ProjectEntry(id=PROJECT)],
        tasks=[TaskEntry(project=PROJECT, id="job", command=command)],
        triggers=triggers,
    )


async def _accounts(su: Database) -> list[Accounting]:
    async def fn(conn: Connection) -> list[Accounting]:
        return await account(conn, [PROJECT])

    return await su.run(fn)


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
async def test_a_job_longer_than_its_period_never_overlaps(
    server: EmbeddedPostgres, tmp_path: Path, overlap: str
) -> None:
    """Rule: with a 2.5 s job on an every-second trigger, `skip` never has two Runs of a
    trigger queued or running at once, and `buffer_one` never more than one held besides;
    Runs keep running (the held one is released), and the buckets add up."""
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, f"ov_{overlap}")
        spec = _spec("sleep 2.5", overlap=overlap)
        await connect_once(db.admin_dsn, lambda conn: publish(conn, spec))
        async with open_su(db.superuser_dsn) as su:
            await seed_cursors(su, lead_ms=1500)
            replicas = [ReplicaProcess(f"r{i}", db.runtime_dsn, tmp_path) for i in (1, 2)]
            w = WorkerProcess("w1", db.dsn("qlsched_worker"), tmp_path, lease_ms=5_000)
            worst = {"active": 0, "held": 0}
            try:
                async with running_replicas(replicas):
                    await w.start()
                    end = await db_now_ms(su) + int(WINDOW_S * 1000)
                    while await db_now_ms(su) < end:
                        for row in await fetch(su, SAMPLE_SQL):
                            worst["active"] = max(worst["active"], row["active"])
                            worst["held"] = max(worst["held"], row["held"])
                        await trio.sleep(0.05)
            finally:
                await w.stop()
            ended = await fetch(
                su,
                "SELECT trigger_id, count(*)::int AS n FROM qlsched.runs"
                " WHERE state = 'succeeded' GROUP BY 1",
            )
            accounts = await _accounts(su)
    assert worst["active"] == 1, worst
    assert worst["held"] == (1 if overlap == "buffer_one" else 0), worst
    assert all(r["n"] >= 2 for r in ended), ended  # it went on running after a skip/hold
    assert len(ended) == 2
    assert all(a.balanced for a in accounts), [a.describe() for a in accounts]
    assert all(a.overlap_skipped > 0 for a in accounts), [a.describe() for a in accounts]


async def test_cancel_other_stops_the_running_job(server: EmbeddedPostgres, tmp_path: Path) -> None:
    """Rule: under `cancel_other`, the next occurrence's Run asks the running one to cancel;
    its worker stops the job (a 60 s sleep) and finishes it `cancelled`, long before the
    job would have ended, and the newest Run then runs."""
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, "ov_cancel")
        spec = _spec("sleep 60", overlap="cancel_other", cron="*/2 * * * * *")
        await connect_once(db.admin_dsn, lambda conn: publish(conn, spec))
        async with open_su(db.superuser_dsn) as su:
            await seed_cursors(su, lead_ms=1500)
            replicas = [ReplicaProcess(f"r{i}", db.runtime_dsn, tmp_path) for i in (1, 2)]
            w = WorkerProcess("w1", db.dsn("qlsched_worker"), tmp_path, lease_ms=3_000)
            try:
                async with running_replicas(replicas):
                    await w.start()

                    async def stopped() -> bool:
                        rows = await fetch(
                            su,
                            "SELECT count(*)::int AS n FROM qlsched.runs AS r"
                            " JOIN qlsched.attempts AS a ON a.run_id = r.run_id"
                            " WHERE r.state = 'cancelled' AND r.cancel_reason = 'overlap'"
                            " AND a.state = 'cancelled' AND a.started_at_ms IS NOT NULL",
                        )
                        return bool(rows[0]["n"] >= 2)

                    await poll(stopped, timeout_s=40, interval_s=0.2)
            finally:
                await w.stop()
            took = await fetch(
                su,
                "SELECT max(a.finished_at_ms - a.started_at_ms)::bigint AS ms"
                " FROM qlsched.attempts AS a WHERE a.state = 'cancelled'"
                " AND a.started_at_ms IS NOT NULL",
            )
    assert took[0]["ms"] < 30_000, took


async def test_a_run_with_no_worker_is_cancelled_at_its_deadline(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: with replicas running and no worker, every Run of a trigger with a 1 s start
    deadline is cancelled (reason `start_deadline`) once its deadline passed, counted on its
    row; none stays queued past its deadline by more than a few poll intervals."""
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, "ov_deadline")
        spec = _spec("true", start_deadline_ms=1_000)
        await connect_once(db.admin_dsn, lambda conn: publish(conn, spec))
        async with open_su(db.superuser_dsn) as su:
            await seed_cursors(su, lead_ms=1500)
            replicas = [ReplicaProcess(f"r{i}", db.runtime_dsn, tmp_path) for i in (1, 2)]
            async with running_replicas(replicas):

                async def cancelled_some() -> bool:
                    rows = await fetch(
                        su,
                        "SELECT count(*)::int AS n FROM qlsched.runs"
                        " WHERE cancel_reason = 'start_deadline'",
                    )
                    return bool(rows[0]["n"] >= 6)

                await poll(cancelled_some, timeout_s=40, interval_s=0.2)
            overdue = await fetch(
                su,
                "SELECT count(*)::int AS n FROM qlsched.runs WHERE state = 'queued'"
                " AND start_by_ms < (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
                " - 10000",
            )
            counted = await fetch(
                su,
                "SELECT sum(deadline_cancelled_total)::int AS n FROM qlsched.trigger_schedules",
            )
            by_reason = await fetch(
                su,
                "SELECT count(*)::int AS n FROM qlsched.runs WHERE state = 'cancelled'"
                " AND cancel_reason = 'start_deadline'",
            )
    assert overdue[0]["n"] == 0
    assert counted[0]["n"] == by_reason[0]["n"] >= 6
