"""Every ordering of a retention prune against a backfill's request round (docs/contract.md
§14): the prune deletes finished Runs of past occurrences while a backfill recorded before
it admits the same occurrences under the same keys.

Each ordering starts with three past occurrences of a trigger that each had a Run, finished
long ago (past a one-minute retention), and a backfill of those occurrences recorded before
the retention was set (so recording let it through). Replica A's program is the requests
pass cut into ``claim`` and ``admit``; replica P's is one prune batch (the function the
replicas call). The oracle: no occurrence runs twice: a key whose Run the prune deleted
never gets a second Run (the admit found the key taken before the prune, or is refused
``before_retention`` after it); the request ends done or refused, never pending; the
prune's counts match the Runs it deleted.
"""

from __future__ import annotations

from qlsched.postgres.pool import open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.requests import record_backfill
from qlsched.postgres.retention import prune_batch
from tests.interleave.engine import Engine, Session, Step, count_orderings, orderings
from tests.interleave.tally import TALLY
from tests.interleave.test_requests_explorer import (
    MINUTE_MS,
    NOW_SQL,
    _file,
    _request_replica,
    _world,
)
from tests.support.pg import TestDatabase

OLD_RUNS_SQL = """
WITH t AS (SELECT * FROM qlsched.triggers WHERE trigger_id = $1),
r AS (
    INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
        task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state, owner,
        queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,
        admitted_claim_version, finished_at_ms)
    SELECT gen_random_uuid(), t.project_id, t.trigger_id, t.revision, t.task_id,
        t.task_revision, t.execution_revision_id, s,
        'ql3:cron:v1:' || t.trigger_id || ':' || t.revision || ':' || s, 'succeeded',
        'runtime', s, s, 'explorer', gen_random_uuid(), 1, s + 1000
      FROM t, unnest($2::bigint[]) AS s
    RETURNING run_id, created_at_ms)
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT gen_random_uuid(), run_id, 1, 'run.created', created_at_ms, 'explorer' FROM r
"""
KEYS_SQL = (
    "SELECT idempotency_key, count(*)::int AS n FROM qlsched.runs WHERE trigger_id = $1 GROUP BY 1"
)


async def test_every_ordering_of_a_prune_and_a_backfill(pg_db: TestDatabase) -> None:
    """Every interleaving of a prune batch with a backfill's claim and admit over the
    pruned occurrences: no occurrence gets a second Run, the request ends, counts match."""
    failures: list[str] = []
    explored = 0
    sizes = [2, 1]
    async with _world(pg_db) as world:
        watch = await world.connect(pg_db.superuser_dsn)
        su = await world.connect(pg_db.superuser_dsn)
        admin = await world.connect(pg_db.admin_dsn)
        a = await _request_replica(world, "a")
        pruner = await world.stack.enter_async_context(open_database(pg_db.runtime_dsn, max_size=1))
        engine = Engine(watch.conn, world.loop, gate_pid=-1)
        for n, order in enumerate(orderings(sizes)):
            project = f"r{n}"
            trigger_id = f"{project}x"
            await admin.call(publish, admin.conn, _file(project))
            now = int(await su.fetchval(NOW_SQL))
            minute = now // MINUTE_MS * MINUTE_MS
            cursor = minute - MINUTE_MS
            past = [cursor - k * MINUTE_MS for k in (5, 4, 3)]
            await su.execute(
                "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $2,"
                " decided_from_ms = $2 WHERE trigger_id = $1",
                trigger_id,
                cursor,
            )
            await su.execute(OLD_RUNS_SQL, trigger_id, past)
            await admin.call(
                record_backfill,
                admin.conn,
                project,
                trigger_id,
                from_ms=past[0],
                to_ms=past[-1],
                max_occurrences=10,
            )
            await su.execute("UPDATE qlsched.retention SET retention_ms = 60000")
            await a.refresh()
            pruned: list[int] = []

            async def prune(into: list[int] = pruned) -> None:
                batch = await prune_batch(pruner, limit=100)
                into.append(batch.pruned.runs)

            program_a = [Step("A", "claim", a.claim), Step("A", "admit", a.admit)]
            program_p = [Step("P", "prune", prune)]
            sessions = [Session("A", lambda: a.pids), Session("P", list)]
            trace = await engine.run([program_a, program_p], sessions, order)
            explored += 1
            problems = [f"{s} raised {e!r}" for s, e in trace.errors.items()]
            keys = await su.fetch(KEYS_SQL, trigger_id)
            problems += [
                f"key {k['idempotency_key']} has {k['n']} Runs" for k in keys if k["n"] > 1
            ]
            if pruned and pruned[0] and keys:
                problems.append(f"pruned {pruned[0]} Runs, yet {len(keys)} keys have a Run again")
            [request] = await su.fetch(
                "SELECT state, refused_reason FROM qlsched.control_requests WHERE trigger_id = $1",
                trigger_id,
            )
            if request["state"] == "pending":
                problems.append("the request is left pending after its round")
            await su.execute("UPDATE qlsched.retention SET retention_ms = NULL")
            if problems:
                failures.append(f"[{' '.join(trace.effective)}]: " + "; ".join(problems))
    TALLY.explorations += 1
    TALLY.orderings += explored
    TALLY.failed += len(failures)
    TALLY.lines.extend(failures)
    assert explored == count_orderings(sizes)
    assert not failures, "\n".join(failures)
