"""Retention on PostgreSQL (docs/contract.md §14): the prune batch as the runtime role, on
Runs admitted by the real scheduler path and finished by the real worker protocol.

Runs are made old by moving their ``finished_at_ms`` into the database's past as the
superuser (the horizon is the database's clock less the retention, so nothing waits)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from prometheus_client import CollectorRegistry

from qlsched.cluster.retention import Pruner, RetentionMetrics
from qlsched.core.work import JobResult
from qlsched.postgres import worker
from qlsched.postgres.retention import prune_batch, read_totals, set_retention
from tests.integration.adapter_support import Env, open_env
from tests.support.pg import TestDatabase
from tests.worker.support import admitted, claim, synthetic_runs, worker_db

OK = JobResult(end="succeeded", code="succeeded", exit_code=0, output_tail="ok\n")
FAILED = JobResult(end="failed", code="exit_nonzero", exit_code=1, output_tail="no\n")
HOUR_MS = 3_600_000


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened


async def set_retention_ms(env: Env, ms: int | None) -> None:
    async def fn(conn: Any) -> None:
        await set_retention(conn, ms, actor=None)

    await env.admin(fn)


async def age(env: Env, run_ids: list[str], ms: int) -> None:
    """Move these Runs' end ``ms`` into the database's past."""
    await env.su_exec(
        "UPDATE qlsched.runs SET finished_at_ms ="
        " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - $2"
        " WHERE run_id = ANY($1::uuid[])",
        run_ids,
        ms,
    )


async def rows_of(env: Env, run_ids: list[str]) -> tuple[int, int, int, int]:
    [row] = await env.su(
        "SELECT (SELECT count(*) FROM qlsched.runs WHERE run_id = ANY($1::uuid[]))::int AS r,"
        " (SELECT count(*) FROM qlsched.attempts WHERE run_id = ANY($1::uuid[]))::int AS a,"
        " (SELECT count(*) FROM qlsched.run_events WHERE run_id = ANY($1::uuid[]))::int AS e,"
        " (SELECT count(*) FROM qlsched.recovery_marks WHERE run_id = ANY($1::uuid[]))::int"
        " AS m",
        run_ids,
    )
    return row["r"], row["a"], row["e"], row["m"]


async def finished_runs(env: Env, n: int) -> tuple[list[str], list[str]]:
    """``n`` Runs through admit and the worker: even ones succeeded, odd ones failed. And
    two more left unfinished: one queued, one running. Returns (finished, unfinished)."""
    runs = await admitted(env, n + 2)
    async with worker_db(env) as db:
        claimed = await claim(db, n + 1)
        for i, c in enumerate(claimed[:n]):
            result = OK if i % 2 == 0 else FAILED
            token = c.lease_token
            await worker.finish(db, attempt_id=c.attempt_id, lease_token=token, result=result)
    done = [c.run_id for c in claimed[:n]]
    rest = [str(r.run_id) for r in runs if str(r.run_id) not in done]
    return done, rest


async def test_prune_deletes_exactly_the_finished_runs_past_the_horizon(env: Env) -> None:
    """Rule: a prune deletes the finished Runs that ended before the horizon, with their
    Attempts, events and recovery marks, and counts each row; a finished Run inside the
    horizon and an unfinished one (even with a long-past timestamp) stay whole."""
    finished, unfinished = await finished_runs(env, 6)
    old, young = finished[:4], finished[4:]
    await age(env, old, 2 * HOUR_MS)
    await age(env, young, 10 * 60_000)
    # An unfinished Run whose finished_at_ms lies far in the past (as a corrupt row would)
    # is still never deleted: the state decides, not the timestamp.
    await age(env, unfinished, 10 * HOUR_MS)
    await env.su_exec(
        "INSERT INTO qlsched.recovery_marks (attempt_id, run_id, reason, marked_at_ms, marked_by)"
        " SELECT attempt_id, run_id, 'test', 0, 'test' FROM qlsched.attempts"
        " WHERE run_id = ANY($1::uuid[])",
        [old[0], young[0]],
    )
    before_old = await rows_of(env, old)
    before_kept = await rows_of(env, young + unfinished)
    assert before_old[:2] == (4, 4)
    assert before_old[2] >= 16  # created, queued, running, and the end, at least
    assert before_old[3] == 1

    off = await prune_batch(env.claim_db)
    assert (off.horizon_ms, off.pruned.runs) == (None, 0)  # retention off: nothing deleted

    await set_retention_ms(env, HOUR_MS)
    now = await env.now_ms()
    batch = await prune_batch(env.claim_db, limit=100)
    assert batch.horizon_ms is not None
    assert abs(batch.horizon_ms - (now - HOUR_MS)) < 5_000
    pruned = batch.pruned
    assert (pruned.runs, pruned.attempts, pruned.events, pruned.marks) == before_old
    assert await rows_of(env, old) == (0, 0, 0, 0)
    assert await rows_of(env, young + unfinished) == before_kept
    again = await prune_batch(env.claim_db)
    assert again.pruned.runs == 0
    totals = await env.admin(read_totals)
    assert totals == pruned


async def test_prune_goes_oldest_first_in_batches_of_its_limit(env: Env) -> None:
    """Rule: each batch deletes at most its limit, the oldest ends first, until none is
    left past the horizon."""
    finished, _ = await finished_runs(env, 5)
    for i, run_id in enumerate(finished):
        await age(env, [run_id], (10 - i) * HOUR_MS)  # finished[0] ended first
    await set_retention_ms(env, HOUR_MS)
    left: list[list[str]] = []
    for _ in range(3):
        batch = await prune_batch(env.claim_db, limit=2)
        rows = await env.su("SELECT run_id::text AS id FROM qlsched.runs")
        left.append(sorted(set(finished) & {r["id"] for r in rows}))
        assert batch.pruned.runs == min(2, 5 - 2 * len(left[:-1]))
    assert left == [sorted(finished[2:]), sorted(finished[4:]), []]


async def test_two_pruners_at_once_take_disjoint_batches_and_count_exactly(env: Env) -> None:
    """Rule: replicas prune without a leader: batches claimed with SKIP LOCKED never hold
    one Run twice, so two pruners racing over one history delete every old Run once, and
    their counts add up exactly to the rows that were there (and to the stored totals)."""
    await env.publish(_one_trigger())
    history = 3_000
    await synthetic_runs(env, history, age_ms=2 * HOUR_MS, finished=True, spacing_ms=1000)
    [[runs, attempts, events]] = [
        tuple(r)
        for r in await env.su(
            "SELECT (SELECT count(*) FROM qlsched.runs)::int,"
            " (SELECT count(*) FROM qlsched.attempts)::int,"
            " (SELECT count(*) FROM qlsched.run_events)::int"
        )
    ]
    assert (runs, attempts, events) == (history, history, 2 * history)
    await set_retention_ms(env, HOUR_MS)
    second = await env.open_store()  # its own pools: another replica as far as PG sees
    pools = [env.claim_db, second._claim_db]
    counted: list[list[int]] = [[], []]

    async def pruner(i: int) -> None:
        while True:
            batch = await prune_batch(pools[i], limit=50)
            counted[i].append(batch.pruned.runs)
            if batch.pruned.runs == 0:
                return
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pruner, 0)
        nursery.start_soon(pruner, 1)
    assert sum(counted[0]) + sum(counted[1]) == history
    assert all(0 <= n <= 50 for n in counted[0] + counted[1])
    assert await env.su_val("SELECT count(*) FROM qlsched.runs") == 0
    assert await env.su_val("SELECT count(*) FROM qlsched.run_events") == 0
    totals = await env.admin(read_totals)
    assert (totals.runs, totals.attempts, totals.events) == (history, history, 2 * history)


async def test_runs_locked_by_another_pruner_are_skipped_not_waited_on(env: Env) -> None:
    """Rule: each batch is claimed with SKIP LOCKED: while another transaction holds the
    oldest Runs locked (another replica's batch in flight), a prune neither waits for them
    (the runtime role's lock timeout would fail it) nor deletes one; it takes the next
    oldest ones, and the locked Runs are pruned once they are free."""
    await env.publish(_one_trigger())
    await synthetic_runs(env, 30, age_ms=2 * HOUR_MS, finished=True, spacing_ms=1000)
    await set_retention_ms(env, HOUR_MS)
    held = await env.connect()
    await held.execute("BEGIN")
    locked = await held.fetch(
        "SELECT run_id FROM qlsched.runs ORDER BY finished_at_ms LIMIT 10 FOR UPDATE"
    )
    with trio.fail_after(20):
        second = await prune_batch(env.claim_db, limit=10)
    assert second.pruned.runs == 10
    left = {r["run_id"] for r in await env.su("SELECT run_id FROM qlsched.runs")}
    assert {r["run_id"] for r in locked} <= left
    assert len(left) == 20
    await held.execute("ROLLBACK")
    third = await prune_batch(env.claim_db, limit=10)
    assert third.pruned.runs == 10
    left = {r["run_id"] for r in await env.su("SELECT run_id FROM qlsched.runs")}
    assert not {r["run_id"] for r in locked} & left  # oldest first once free
    assert (await env.admin(read_totals)).runs == 20


async def test_a_failing_batch_is_a_diagnostic_and_the_next_pass_goes_on(env: Env) -> None:
    """Rule: a prune that fails never ends the replica's pruner: the pass stops with a
    `retention_failed` diagnostic (its SQLSTATE, no message) and a failure count, and the
    next pass, once the cause is gone, deletes and counts as usual; a pass sends batches
    until one comes back short."""
    await env.publish(_one_trigger())
    await synthetic_runs(env, 25, age_ms=2 * HOUR_MS, finished=True, spacing_ms=1000)
    await set_retention_ms(env, HOUR_MS)
    registry = CollectorRegistry()
    pruner = Pruner(
        env.claim_db,
        owner="r1",
        cadence_ms=1000,
        sink=env.sink,
        metrics=RetentionMetrics(registry),
        batch=10,
    )
    await env.su_exec(
        "REVOKE EXECUTE ON FUNCTION qlsched.prune_finished_runs(integer) FROM qlsched_runtime"
    )
    assert await pruner.prune_pass() is False
    [failed] = env.sink.items
    assert (failed.code, failed.replica, failed.sqlstate) == ("retention_failed", "r1", "42501")
    assert registry.get_sample_value("qlsched_retention_failures_total") == 1
    await env.su_exec(
        "GRANT EXECUTE ON FUNCTION qlsched.prune_finished_runs(integer) TO qlsched_runtime"
    )
    assert await pruner.prune_pass() is False  # 10, 10, then 5: short, the pass ends
    assert await env.su_val("SELECT count(*) FROM qlsched.runs") == 0
    for name, value in (("pruned_runs", 25), ("pruned_events", 50), ("batches", 3)):
        assert registry.get_sample_value(f"qlsched_retention_{name}_total") == value


def _one_trigger() -> Any:
    from tests.worker.support import task_file

    return task_file(1)
