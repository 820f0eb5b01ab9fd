"""The worker's protocol on PostgreSQL (docs/contract.md §13): claim, heartbeat, finish and
reap as the qlsched_worker role, on Runs admitted by the real scheduler path."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from qlsched.core.specs import TaskEntry
from qlsched.core.work import (
    Extended,
    FenceRefused,
    Finished,
    JobResult,
    LeaseLost,
)
from qlsched.postgres import worker
from qlsched.postgres.recovery import recovery_candidates
from tests.integration.adapter_support import Env, open_env
from tests.support.pg import TestDatabase
from tests.worker.support import (
    admitted,
    attempts,
    claim,
    events,
    expire,
    run_row,
    worker_db,
)

OK = JobResult(end="succeeded", code="succeeded", exit_code=0, output_tail="hi\n")
FAILED = JobResult(end="failed", code="exit_nonzero", exit_code=3, output_tail="boom\n")


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened


async def test_claim_takes_each_queued_run_once_with_a_lease(env: Env) -> None:
    """Rule: one claim takes queued Runs whose latest Attempt is pristine, oldest first; each
    Attempt becomes running under a token and an expiry from the database clock, the Run
    running with its run.running event; a second claim finds nothing."""
    runs = await admitted(env, 3)
    async with worker_db(env) as db:
        before = await env.now_ms()
        claimed = await claim(db, 2)
        assert len(claimed) == 2
        rest = await claim(db, 5)
        assert len(rest) == 1
        assert await claim(db, 5) == []
    assert {c.run_id for c in claimed + rest} == {str(r.run_id) for r in runs}
    c = claimed[0]
    assert c.lease_expires_at_ms >= before + 30_000
    assert c.payload.startswith('{"command":"true"')
    assert c.idempotency_key.startswith("ql3:cron:v1:")
    [a] = await attempts(env, c.run_id)
    assert (a["state"], a["worker_id"], a["lease_id"]) == ("running", "w1", c.lease_token)
    assert (await run_row(env, c.run_id))["state"] == "running"
    assert await events(env, c.run_id) == ["run.created", "run.queued", "run.running"]


async def test_finish_succeeded_is_terminal_and_fenced(env: Env) -> None:
    """Rule: a finish under the lease writes the outcome, the Run's terminal state and its
    event in one statement; a second finish of the same Attempt is refused (no second
    terminal state), and so is one with another token."""
    await admitted(env)
    async with worker_db(env) as db:
        [c] = await claim(db)
        wrong = await worker.finish(db, attempt_id=c.attempt_id, lease_token="x", result=OK)
        assert isinstance(wrong, FenceRefused)
        done = await worker.finish(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=OK
        )
        assert done == Finished(run_state="succeeded")
        again = await worker.finish(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=FAILED
        )
        assert isinstance(again, FenceRefused)
    [a] = await attempts(env, c.run_id)
    assert (a["state"], a["result"], a["exit_code"], a["output_tail"]) == (
        "succeeded",
        "succeeded",
        0,
        "hi\n",
    )
    run = await run_row(env, c.run_id)
    assert run["state"] == "succeeded"
    assert run["finished_at_ms"] is not None
    assert (await events(env, c.run_id))[-1] == "run.succeeded"


async def test_expired_lease_refuses_heartbeat_and_finish(env: Env) -> None:
    """Rule: heartbeat and finish are fenced by the database clock: once the lease expired
    (a SIGSTOPped worker waking up late) neither changes anything."""
    await admitted(env)
    async with worker_db(env) as db:
        [c] = await claim(db)
        beat = await worker.heartbeat(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, lease_ms=60_000
        )
        assert isinstance(beat, Extended)
        assert not beat.cancel_requested
        assert beat.lease_expires_at_ms > c.lease_expires_at_ms
        await expire(env, c.attempt_id)
        lost = await worker.heartbeat(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, lease_ms=60_000
        )
        assert isinstance(lost, LeaseLost)
        refused = await worker.finish(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=OK
        )
        assert isinstance(refused, FenceRefused)
    [a] = await attempts(env, c.run_id)
    assert a["state"] == "running"
    assert a["finished_at_ms"] is None
    assert (await run_row(env, c.run_id))["state"] == "running"


async def test_lost_attempt_is_retried_after_its_backoff(env: Env) -> None:
    """Rule: an expired lease makes the Attempt lost (reap); with max_attempts left the Run
    goes back to queued with a new pristine Attempt not claimable before the back-off; with
    none left the Run fails. Events: run.attempt_lost then run.queued / run.failed."""
    task = TaskEntry(project="p", id="task", command="true", max_attempts=2, retry_backoff_ms=400)
    await admitted(env, task=task)
    async with worker_db(env) as db:
        [c] = await claim(db)
        await expire(env, c.attempt_id)
        [reaped] = await worker.reap(db, limit=10, actor="w2")
        assert reaped.run_state == "queued"
        assert reaped.retry_at_ms is not None
        assert await claim(db) == []  # inside the back-off
        first, second = await attempts(env, c.run_id)
        assert (first["state"], first["error"]) == ("lost", "lease_expired")
        assert second["state"] == "claimed"
        assert second["worker_id"] is None
        assert second["lease_id"] is None
        assert second["started_at_ms"] is None
        await env.wait_db_time(reaped.retry_at_ms)
        [again] = await claim(db)
        assert (again.run_id, again.attempt_no) == (c.run_id, 2)
        await expire(env, again.attempt_id)
        [final] = await worker.reap(db, limit=10, actor="w2")
        assert final.run_state == "failed"
        assert final.retry_at_ms is None
        assert await worker.reap(db, limit=10, actor="w2") == []
    assert await events(env, c.run_id) == [
        "run.created",
        "run.queued",
        "run.running",
        "run.attempt_lost",
        "run.queued",
        "run.running",
        "run.attempt_lost",
        "run.failed",
    ]


async def test_failed_job_retries_then_succeeds(env: Env) -> None:
    """Rule: a failed Attempt is retried under the policy (no back-off: claimable at once);
    the retry that succeeds makes the Run succeeded; the default policy never retries."""
    task = TaskEntry(project="p", id="task", command="false", max_attempts=2)
    await admitted(env, task=task)
    async with worker_db(env) as db:
        [c] = await claim(db)
        out = await worker.finish(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=FAILED
        )
        assert isinstance(out, Finished)
        assert out.run_state == "queued"
        [c2] = await claim(db)
        assert c2.attempt_no == 2
        out2 = await worker.finish(
            db, attempt_id=c2.attempt_id, lease_token=c2.lease_token, result=OK
        )
        assert out2 == Finished(run_state="succeeded")
    assert (await events(env, c.run_id))[3:] == [
        "run.attempt_failed",
        "run.queued",
        "run.running",
        "run.succeeded",
    ]


async def test_default_policy_fails_at_once(env: Env) -> None:
    """Rule: max_attempts defaults to 1: a failed Attempt fails the Run, no retry."""
    await admitted(env)
    async with worker_db(env) as db:
        [c] = await claim(db)
        out = await worker.finish(
            db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=FAILED
        )
        assert out == Finished(run_state="failed")
        assert await claim(db) == []
    assert len(await attempts(env, c.run_id)) == 1


async def test_recovery_leaves_worker_held_attempts_alone(env: Env) -> None:
    """Rule: an Attempt a worker holds under a lease (expired or not) is the worker's, not
    the scheduler's to mark: the recovery source does not list it."""
    await admitted(env, 2)
    async with worker_db(env) as db:
        c1, _ = await claim(db)
        await expire(env, c1.attempt_id)
        assert await env.runtime(recovery_candidates) == []
