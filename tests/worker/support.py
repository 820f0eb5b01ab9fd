"""Shared setup for the worker's tests: queued Runs admitted by the real scheduler path
(claim + admit as the runtime role), a worker-role pool, and reads of the lifecycle as the
superuser. Times come from the database; waits poll it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from qlsched.core.outcomes import Admitted
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.core.work import ClaimedRun
from qlsched.postgres import worker
from qlsched.postgres.pool import Database, open_database
from tests.integration.adapter_support import LEASE_MS, Env, fire_for, trigger, trigger_ids

WORKER_LEASE_MS = 30_000


def task_file(n: int, task: TaskEntry | None = None, *, project: str = "p") -> PublishFile:
    """One project, one task (``true`` unless given), ``n`` every-minute triggers."""
    t = task or TaskEntry(project=project, id="task", command="true")
    return PublishFile(
        projects=[ProjectEntry(id=project)],
        tasks=[t],
        triggers=[trigger(project, name, task=t.id) for name in trigger_ids(n)],
    )


async def admitted(env: Env, n: int = 1, task: TaskEntry | None = None) -> list[Admitted]:
    """``n`` queued Runs with pristine Attempts, through the real claim and admit."""
    await env.publish(task_file(n, task))
    await env.make_due()
    claims = await env.store.claim("r1", n, LEASE_MS)
    outcomes = await env.store.admit([fire_for(c) for c in claims])
    assert all(isinstance(o, Admitted) for o in outcomes), outcomes
    return [o for o in outcomes if isinstance(o, Admitted)]


@asynccontextmanager
async def worker_db(env: Env, dsn: str | None = None) -> AsyncIterator[Database]:
    async with open_database(dsn or env.db.worker_dsn, max_size=2) as db:
        yield db


async def claim(db: Database, n: int = 16, *, lease_ms: int = WORKER_LEASE_MS) -> list[ClaimedRun]:
    return await worker.claim(db, worker_id="w1", session_id="s1", limit=n, lease_ms=lease_ms)


async def expire(env: Env, attempt_id: str) -> None:
    """Move an Attempt's lease expiry just into the database's past (nothing else)."""
    await env.su_exec(
        "UPDATE qlsched.attempts SET lease_expires_at_ms ="
        " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1 WHERE attempt_id = $1",
        attempt_id,
    )


async def run_row(env: Env, run_id: str) -> dict[str, Any]:
    [row] = await env.su("SELECT * FROM qlsched.runs WHERE run_id = $1", run_id)
    return dict(row)


async def attempts(env: Env, run_id: str) -> list[dict[str, Any]]:
    rows = await env.su(
        "SELECT * FROM qlsched.attempts WHERE run_id = $1 ORDER BY attempt_no", run_id
    )
    return [dict(r) for r in rows]


async def events(env: Env, run_id: str) -> list[str]:
    rows = await env.su(
        "SELECT type FROM qlsched.run_events WHERE run_id = $1 ORDER BY seq", run_id
    )
    return [r["type"] for r in rows]


async def wait_until(env: Env, sql: str, *args: Any, timeout_s: float = 30.0) -> None:
    """Poll until ``sql`` (a superuser boolean query) is true."""
    with trio.fail_after(timeout_s):
        while True:
            if await env.su_val(sql, *args):
                return
            await trio.sleep(0.05)


_SYNTHETIC_RUNS = """
WITH t AS (
    SELECT tr.project_id, tr.trigger_id, tr.revision, tr.task_id, tr.task_revision,
           tr.execution_revision_id
      FROM qlsched.triggers AS tr
     WHERE $3::text IS NULL OR tr.task_id = $3::text
     ORDER BY tr.project_id, tr.trigger_id
     LIMIT 1
), now AS (SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint AS ms),
runs AS (
    INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
        task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state,
        owner, queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,
        admitted_claim_version, started_at_ms, finished_at_ms)
    SELECT gen_random_uuid(), t.project_id, t.trigger_id, t.revision, t.task_id,
           t.task_revision, t.execution_revision_id, x.at_ms,
           'test:' || t.task_id || ':' || x.state || ':' || i, x.state, 'runtime', x.at_ms,
           x.at_ms, 'test', gen_random_uuid(), 1,
           CASE WHEN $4 THEN x.at_ms END, CASE WHEN $4 THEN x.at_ms END
      FROM t, now, generate_series(1, $1::int) AS i,
           LATERAL (SELECT now.ms - $2::bigint - i * $5::bigint AS at_ms,
                           CASE WHEN $4 THEN (ARRAY['succeeded', 'failed', 'cancelled'])[1 + i % 3]
                                ELSE 'queued' END AS state) AS x
    RETURNING run_id, state, created_at_ms
), attempts AS (
    INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                  created_at_ms)
    SELECT gen_random_uuid(), r.run_id, 1, 'remote_worker',
           CASE WHEN r.state = 'queued' THEN 'claimed' ELSE r.state END, r.created_at_ms
      FROM runs AS r
)
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT gen_random_uuid(), r.run_id, s, (ARRAY['run.created', 'run.' || r.state])[s],
       r.created_at_ms, 'test'
  FROM runs AS r, generate_series(1, 2) AS s
"""


async def synthetic_runs(
    env: Env,
    n: int,
    *,
    age_ms: int,
    finished: bool,
    task: str | None = None,
    spacing_ms: int = 1,
) -> None:
    """``n`` Runs of one trigger (of ``task``; None: the first), written directly (fast, for
    a history or a backlog), each with an Attempt and two events: finished ones (succeeded,
    failed and cancelled in turn) that ended, or queued ones with a pristine Attempt queued,
    ``age_ms`` ago and every ``spacing_ms`` before that."""
    await env.su_exec(_SYNTHETIC_RUNS, n, age_ms, task, finished, spacing_ms)
