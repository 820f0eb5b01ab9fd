"""The whole loop on real processes (docs/contract.md §13): two ``qlsched run`` replicas
admit a minute of every-second triggers while two ``qlsched work`` workers run them. When
nothing fails, every occurrence has exactly one Run (the package's verifier), every Run
succeeded with exactly one Attempt, and every job ran exactly once: each job appends its
QLSCHED_IDEMPOTENCY_KEY to a file, and the file holds each Run's key once.

``QLSCHED_WORKER_GATE_S`` shortens the window for a quick local run (default 60 s).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio_asyncio

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.pool import Connection, Database, connect_once
from qlsched.postgres.publish import publish
from qlsched.tools.verify import VerifyReport, verify_exactly_once
from tests.support.faults import (
    PROJECT,
    ReplicaProcess,
    create_gate_db,
    db_now_ms,
    every_second_triggers,
    fetch,
    fetchval,
    open_su,
    poll,
    report,
    running_replicas,
    seed_cursors,
)
from tests.worker.proc_support import WorkerProcess

pytestmark = pytest.mark.slow

TRIGGERS = 4


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


async def test_two_replicas_two_workers_run_every_occurrence_once(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: admission exactly once and, when nothing fails, execution exactly once: for a
    minute of every-second triggers, one Run per occurrence, each succeeded in one Attempt,
    each job's key written once by the job itself."""
    window_s = float(os.environ.get("QLSCHED_WORKER_GATE_S", "60"))
    seen = tmp_path / "keys"
    command = f"sh -c 'echo \"$QLSCHED_IDEMPOTENCY_KEY\" >> {seen}'"
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, "workers")
        spec = PublishFile(
            projects=[ProjectEntry(id=PROJECT)],
            tasks=[TaskEntry(project=PROJECT, id="job", command=command)],
            triggers=every_second_triggers(TRIGGERS, policies=[("fire_once", 60_000)]),
        )
        await connect_once(db.admin_dsn, lambda conn: publish(conn, spec))
        async with open_su(db.superuser_dsn) as su:
            baseline = await seed_cursors(su, lead_ms=2500)
            replicas = [ReplicaProcess(f"r{i}", db.runtime_dsn, tmp_path) for i in (1, 2)]
            workers = [
                WorkerProcess(f"w{i}", db.dsn("qlsched_worker"), tmp_path, lease_ms=5_000)
                for i in (1, 2)
            ]
            try:
                async with running_replicas(replicas):
                    async with trio.open_nursery() as nursery:
                        for w in workers:
                            nursery.start_soon(w.start)
                    end = await db_now_ms(su) + int(window_s * 1000)
                    await poll(lambda: _past(su, end), timeout_s=window_s + 60, interval_s=0.5)
                await poll(lambda: _drained(su), timeout_s=60, interval_s=0.2)
            finally:
                codes = [await w.stop() for w in workers]
            assert codes == [0, 0], [w.log()[-2000:] for w in workers]

            first = {key: start.cursor_ms for key, start in baseline.items()}

            async def verifier(conn: Connection) -> VerifyReport:
                return await verify_exactly_once(conn, first_cursors=first)

            verdict = await su.run(verifier)
            assert (verdict.duplicates, verdict.lost, verdict.unexpected) == ([], [], [])
            shares = {
                r["worker_id"]: r["n"]
                for r in await fetch(
                    su,
                    "SELECT worker_id, count(*)::int AS n FROM qlsched.attempts GROUP BY 1",
                )
            }
            runs = await fetch(
                su,
                "SELECT r.idempotency_key, r.state, count(a.*) AS attempts,"
                " bool_and(a.state = 'succeeded') AS ok FROM qlsched.runs AS r"
                " JOIN qlsched.attempts AS a ON a.run_id = r.run_id GROUP BY r.run_id",
            )
    assert len(runs) >= TRIGGERS * (window_s - 5)
    assert {(r["state"], r["attempts"], r["ok"]) for r in runs} == {("succeeded", 1, True)}
    written = collections.Counter(seen.read_text().split())
    assert written == collections.Counter(r["idempotency_key"] for r in runs)
    report(f"worker gate: {len(runs)} Runs in {window_s:g} s, each run once; {dict(shares)}")


async def _past(su: Database, end_ms: int) -> bool:
    return await db_now_ms(su) >= end_ms


async def _drained(su: Database) -> bool:
    left = await fetchval(
        su, "SELECT count(*) FROM qlsched.runs WHERE state IN ('queued', 'running')"
    )
    return int(left) == 0
