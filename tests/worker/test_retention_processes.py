"""Retention while the system runs (docs/contract.md §14), on real processes: two
``qlsched run`` replicas admit every-second triggers, a ``qlsched work`` worker runs them,
and the operator sets the retention with ``qlsched retention set``.

The Runs that finished before a moment T are made old by moving their end two hours into
the database's past (as the superuser); everything else keeps running. The replicas then
delete exactly those Runs with their Attempts and events, no other Run (neither an
unfinished one nor one that finished after T), count each once across both replicas
(their ``/metrics`` add up to the stored totals), and the per-trigger accounting still
balances with the deleted Runs counted as Runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio_asyncio

from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.pool import Connection, Database
from qlsched.tools.accounting import account, unbalanced
from tests.integration.schema_support import run_cli
from tests.support.faults import (
    ReplicaProcess,
    create_gate_db,
    every_second_triggers,
    fetch,
    fetchval,
    open_su,
    poll,
    publish_triggers,
    report,
    running_replicas,
    scrape_metrics,
    seed_cursors,
)
from tests.worker.proc_support import WorkerProcess

pytestmark = pytest.mark.slow

OLD_MS = 2 * 3_600_000
COUNT_FINISHED = (
    "SELECT count(*) FROM qlsched.runs WHERE state IN ('succeeded', 'failed', 'cancelled')"
)
UNFINISHED_IDS = (
    "SELECT run_id FROM qlsched.runs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')"
)
AGE_FINISHED = (
    "UPDATE qlsched.runs SET finished_at_ms ="
    " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - $1"
    " WHERE state IN ('succeeded', 'failed', 'cancelled') RETURNING run_id"
)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


async def test_replicas_delete_exactly_the_old_finished_runs_while_running(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: with replicas and a worker running, retention deletes exactly the finished
    Runs past the horizon (with their Attempts and events), never an unfinished Run nor a
    finished one inside the horizon, and every deleted row is counted once."""
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, "retention")
        await publish_triggers(db, every_second_triggers(3, policies=[("fire_once", 60_000)]))
        async with open_su(db.superuser_dsn) as su:
            await seed_cursors(su, lead_ms=1500)
            replicas = [
                ReplicaProcess(f"r{i}", db.runtime_dsn, tmp_path, http=True) for i in (1, 2)
            ]
            worker = WorkerProcess("w1", db.dsn("qlsched_worker"), tmp_path, lease_ms=5_000)
            try:
                async with running_replicas(replicas):
                    await worker.start()

                    async def enough_finished() -> bool:
                        return int(await fetchval(su, COUNT_FINISHED)) >= 20

                    await poll(enough_finished, timeout_s=90, interval_s=0.2)
                    old = await _age_finished(su)
                    before = {
                        r["run_id"] for r in await fetch(su, "SELECT run_id FROM qlsched.runs")
                    }
                    unfinished = {r["run_id"] for r in await fetch(su, UNFINISHED_IDS)}
                    old_rows = await _rows_of(su, old)
                    done = run_cli(["retention", "set", "1h", "--dsn", db.admin_dsn])
                    assert done.returncode == 0, done.stderr

                    async def old_gone() -> bool:
                        return await _rows_of(su, old) == (0, 0, 0)

                    await poll(old_gone, timeout_s=60, interval_s=0.2)
                    after = {
                        r["run_id"] for r in await fetch(su, "SELECT run_id FROM qlsched.runs")
                    }
                    metrics = [await scrape_metrics(r.http_port or 0) for r in replicas]
            finally:
                assert await worker.stop() == 0, worker.log()[-2000:]
            assert before - old <= after  # nothing else was deleted, the unfinished included
            assert unfinished <= after
            assert not old & after
            [totals] = await fetch(
                su,
                "SELECT sum(runs)::int AS runs, sum(attempts)::int AS attempts,"
                " sum(events)::int AS events FROM qlsched.retention_pruned",
            )
            assert (totals["runs"], totals["attempts"], totals["events"]) == old_rows
            by_replicas = [
                sum(int(m.get(f"qlsched_retention_pruned_{what}_total", 0)) for m in metrics)
                for what in ("runs", "attempts", "events")
            ]
            assert tuple(by_replicas) == old_rows

            async def accounting(conn: Connection) -> list[str]:
                return unbalanced(await account(conn))

            assert await su.run(accounting) == []
    report(
        f"retention gate: {old_rows[0]} old Runs deleted ({old_rows[1]} attempts,"
        f" {old_rows[2]} events) while {len(after)} stayed; replicas counted {by_replicas}"
    )


async def _age_finished(su: Database) -> set[Any]:
    """Move the end of every Run finished now two hours into the past; their ids."""
    return {r["run_id"] for r in await fetch(su, AGE_FINISHED, OLD_MS)}


async def _rows_of(su: Database, run_ids: set[Any]) -> tuple[int, int, int]:
    ids = list(run_ids)
    [row] = await fetch(
        su,
        "SELECT (SELECT count(*) FROM qlsched.runs WHERE run_id = ANY($1::uuid[]))::int,"
        " (SELECT count(*) FROM qlsched.attempts WHERE run_id = ANY($1::uuid[]))::int,"
        " (SELECT count(*) FROM qlsched.run_events WHERE run_id = ANY($1::uuid[]))::int",
        ids,
    )
    return (row[0], row[1], row[2])
