"""Overlap policy and start deadline (docs/contract.md §13), on real PostgreSQL: the cron
admit decides each occurrence from the trigger's unfinished Runs, a worker's end releases
a held Run, the runs pass releases what a worker did not and cancels Runs nobody started
in time. Each test drives the real statements (the runtime's claim and admit, the
worker's claim, finish and reap) one step at a time."""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Any

import msgspec
import pytest
import trio

from qlsched.admin.requests import trigger_now
from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.core.config import Config
from qlsched.core.control import ControlError, TriggerRef
from qlsched.core.outcomes import Admitted, Outcome, OverlapSkipped
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.core.work import Extended, JobResult
from qlsched.postgres import worker
from qlsched.postgres.overlap import cancel_unstarted, release_held
from qlsched.postgres.pool import Connection
from qlsched.postgres.recovery import recovery_candidates
from qlsched.postgres.requests import PostgresRequestStore
from qlsched.tools.accounting import Accounting, account
from tests.integration.adapter_support import (
    LEASE_MS,
    Env,
    fire_for,
    open_env,
    run_round,
    trigger,
)
from tests.integration.cluster_support import wait_until
from tests.integration.schema_support import run_cli
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase
from tests.worker.support import claim, events, expire, run_row, worker_db

OK = JobResult(end="succeeded", code="succeeded", exit_code=0)


def policy_file(overlap: str, *, deadline_ms: int | None = None, attempts: int = 1) -> PublishFile:
    task = TaskEntry(project="p", id="task", command="true", max_attempts=attempts)
    entry = msgspec.structs.replace(
        trigger("p", "t"), overlap=overlap, start_deadline_ms=deadline_ms
    )
    return PublishFile(projects=[ProjectEntry(id="p")], tasks=[task], triggers=[entry])


async def fire(env: Env) -> Outcome:
    """The trigger's next occurrence through the real claim and admit."""
    await env.make_due(ids=["t"])
    [c] = await env.store.claim("r1", 1, LEASE_MS)
    [outcome] = await env.store.admit([fire_for(c)])
    return outcome


async def states(env: Env) -> list[str]:
    rows = await env.su("SELECT state FROM qlsched.runs ORDER BY created_at_ms, run_id")
    return [r["state"] for r in rows]


async def schedule(env: Env) -> dict[str, Any]:
    [row] = await env.su("SELECT * FROM qlsched.trigger_schedules WHERE trigger_id = 't'")
    return dict(row)


async def test_skip_moves_the_cursor_with_no_run_while_one_is_unfinished(
    pg_db: TestDatabase,
) -> None:
    """Rule: under `skip`, an occurrence while a Run of the trigger is queued or running
    gets no Run: the cursor moves and the row counts it; once that Run has ended, the next
    occurrence gets its Run (a skip never skips behind a Run that had already ended)."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("skip"))
        first = await fire(env)
        assert isinstance(first, Admitted)
        assert not first.held
        assert isinstance(await fire(env), OverlapSkipped)  # queued
        async with worker_db(env) as wdb:
            [run] = await claim(wdb)
            assert isinstance(await fire(env), OverlapSkipped)  # running
            row = await schedule(env)
            assert row["overlap_skipped_total"] == 2
            await worker.finish(
                wdb, attempt_id=run.attempt_id, lease_token=run.lease_token, result=OK
            )
        assert isinstance(await fire(env), Admitted)
        assert await states(env) == ["succeeded", "queued"]
        status = run_cli(["status", "--dsn", env.db.observer_dsn])
        assert "p/t: 2 occurrences overlap-skipped" in status.stdout, status.stdout


async def test_buffer_one_holds_one_run_and_its_end_releases_it(pg_db: TestDatabase) -> None:
    """Rule: under `buffer_one`, the occurrence after an unfinished Run is admitted `held`
    (no worker claims it), a third is skipped, and the worker's finish of the first releases
    the held one exactly once (`run.released`), which a worker then claims."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("buffer_one"))
        assert isinstance(await fire(env), Admitted)
        held = await fire(env)
        assert isinstance(held, Admitted)
        assert held.held
        assert isinstance(await fire(env), OverlapSkipped)
        assert sorted(await states(env)) == ["held", "queued"]  # maybe one millisecond
        async with worker_db(env) as wdb:
            [run] = await claim(wdb)
            assert await claim(wdb) == []  # the held Run is nobody's to claim
            await worker.finish(
                wdb, attempt_id=run.attempt_id, lease_token=run.lease_token, result=OK
            )
            assert await states(env) == ["succeeded", "queued"]
            assert (await events(env, str(held.run_id)))[-2:] == ["run.held", "run.released"]
            [second] = await claim(wdb)
            assert second.run_id == str(held.run_id)
        assert (await schedule(env))["overlap_skipped_total"] == 1


async def test_a_held_run_is_pristine_to_startup_recovery(pg_db: TestDatabase) -> None:
    """Rule: a held Run's Attempt is pristine (no worker took it): startup recovery, which
    marks every other non-pristine Attempt, leaves it alone."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("buffer_one"))
        await fire(env)
        held = await fire(env)
        assert isinstance(held, Admitted)
        assert held.held
        assert await env.runtime(recovery_candidates) == []


async def test_a_lost_worker_releases_the_held_run_through_the_reap(pg_db: TestDatabase) -> None:
    """Rule: when the worker of the unfinished Run dies, the reap that marks its Attempt
    lost (no retry left) also releases the held Run."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("buffer_one"))
        await fire(env)
        held = await fire(env)
        assert isinstance(held, Admitted)
        assert held.held
        async with worker_db(env) as wdb:
            [run] = await claim(wdb)
            await expire(env, run.attempt_id)
            reaped = await worker.reap(wdb, limit=10, actor="w2")
            assert [r.run_state for r in reaped] == ["failed"]
        assert (await run_row(env, str(held.run_id)))["state"] == "queued"


async def test_the_runs_pass_releases_a_held_run_exactly_once(pg_db: TestDatabase) -> None:
    """Rule: a held Run whose trigger has nothing unfinished (its worker's own release never
    ran) is released by the replicas' pass, exactly once however many release at once."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("buffer_one"))
        first = await fire(env)
        held = await fire(env)
        assert isinstance(first, Admitted)
        assert isinstance(held, Admitted)
        assert held.held
        # The first Run ends without its worker's release (as if it died after COMMIT).
        await env.su_exec(
            "UPDATE qlsched.runs SET state = 'succeeded' WHERE run_id = $1", first.run_id
        )
        claim_db, _ = await env.open_pools()
        released: list[int] = []

        async def release(n: int) -> None:
            refs = await release_held(claim_db, limit=10, actor=f"r{n}")
            released.append(len(refs))

        async with trio.open_nursery() as nursery:
            for n in range(4):
                nursery.start_soon(release, n)
        assert sum(released) == 1
        assert (await events(env, str(held.run_id))).count("run.released") == 1
        # Restricted to other triggers, a release leaves it alone.
        assert (
            await release_held(claim_db, limit=10, actor="r", triggers=[TriggerRef("p", "x")]) == []
        )


async def test_cancel_other_admits_and_cancels_the_unfinished_runs(pg_db: TestDatabase) -> None:
    """Rule: under `cancel_other`, the new Run is admitted and the unfinished ones are
    cancelled: a queued one at once (its pristine Attempt too), a running one by asking its
    worker, who sees it at its next heartbeat."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("cancel_other"))
        running = await fire(env)
        async with worker_db(env) as wdb:
            [run] = await claim(wdb)
            queued = await fire(env)
            assert isinstance(queued, Admitted)
            newest = await fire(env)
            assert isinstance(newest, Admitted)
            beat = await worker.heartbeat(
                wdb, attempt_id=run.attempt_id, lease_token=run.lease_token, lease_ms=30_000
            )
            assert isinstance(beat, Extended)
            assert beat.cancel_requested
        assert isinstance(running, Admitted)
        assert (await run_row(env, str(running.run_id)))["state"] == "running"
        assert (await events(env, str(running.run_id)))[-1] == "run.cancel_requested"
        gone = await run_row(env, str(queued.run_id))
        assert (gone["state"], gone["cancel_reason"]) == ("cancelled", "overlap")
        [attempt] = await env.su(
            "SELECT state, result FROM qlsched.attempts WHERE run_id = $1", queued.run_id
        )
        assert (attempt["state"], attempt["result"]) == ("cancelled", "overlap")
        assert (await run_row(env, str(newest.run_id)))["state"] == "queued"


async def test_a_run_nobody_started_by_its_deadline_is_cancelled(pg_db: TestDatabase) -> None:
    """Rule: a queued Run no worker started by its start deadline (database time) is
    cancelled (reason `start_deadline`, its pristine Attempt too) and counted on the row; a
    Run a worker started is left alone, and so is one still inside its deadline."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("allow", deadline_ms=60_000))
        started = await fire(env)
        late = await fire(env)
        assert isinstance(started, Admitted)
        assert isinstance(late, Admitted)
        claim_db, _ = await env.open_pools()
        assert await cancel_unstarted(claim_db, limit=10, actor="r1") == []  # inside it
        async with worker_db(env) as wdb:
            await worker.claim(wdb, worker_id="w1", session_id="s1", limit=1, lease_ms=30_000)
        # Both deadlines pass (the database's clock, moved for these rows only).
        await env.su_exec(
            "UPDATE qlsched.runs SET start_by_ms ="
            " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1"
        )
        done = await cancel_unstarted(claim_db, limit=10, actor="r1")
        assert [r.run_id for r in done] == [str(late.run_id)]
        row = await run_row(env, str(late.run_id))
        assert (row["state"], row["cancel_reason"]) == ("cancelled", "start_deadline")
        [attempt] = await env.su(
            "SELECT state, result FROM qlsched.attempts WHERE run_id = $1", late.run_id
        )
        assert (attempt["state"], attempt["result"]) == ("cancelled", "start_deadline")
        assert (await run_row(env, str(started.run_id)))["state"] == "running"
        assert (await schedule(env))["deadline_cancelled_total"] == 1
        assert (await events(env, str(late.run_id)))[-1] == "run.cancelled"


@pytest.mark.parametrize("overlap", ["skip", "buffer_one", "cancel_other"])
async def test_the_buckets_add_up_under_each_policy(pg_db: TestDatabase, overlap: str) -> None:
    """Rule: per trigger, Runs + skipped + coalesced + paused + overlap-skipped (minus
    backfilled) equals the occurrences decided, under each overlap policy (an every-second
    trigger, real rounds, each after the database's clock passed the due time)."""
    async with open_env(pg_db) as env:
        file = policy_file(overlap)
        every_second = msgspec.structs.replace(file.triggers[0], cron="* * * * * *")
        await env.publish(msgspec.structs.replace(file, triggers=[every_second]))
        outcomes: list[Outcome] = []
        for _ in range(5):
            row = await schedule(env)
            if row["next_fire_at_ms"] is not None:
                due = row["next_fire_at_ms"] + 1

                async def reached(due: int = due) -> bool:
                    return bool(await env.now_ms() >= due)

                await wait_until(reached, timeout_s=30)
            outcomes += (await run_round(env.store, "r1", 16, LEASE_MS)).outcomes

        async def fn(conn: Connection) -> list[Accounting]:
            return await account(conn, ["p"])

        [account_row] = await env.su_call(fn)
        assert account_row.balanced, account_row.describe()
        if overlap != "cancel_other":
            assert account_row.overlap_skipped >= 1, outcomes


def _cli(env: Env, *args: str) -> str:
    result = run_cli([*args, "--dsn", env.db.admin_dsn])
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


async def _requests_pass(env: Env) -> RequestsPass:
    claim_db, admit_db = await env.open_pools()
    store = PostgresRequestStore(claim_db, admit_db, sink=env.sink)
    config = Config(owner="r1", claim_budget=16)
    return RequestsPass(store, config, MemorySink(), Metrics(), budget=16, poll_s=0.0)


async def test_trigger_now_follows_the_policy_unless_it_asks_for_allow(
    pg_db: TestDatabase,
) -> None:
    """Rule: a trigger-now request of a `skip` trigger whose Run is unfinished gets no Run
    (done, counted overlap-skipped on the request, shown by status); one recorded with
    `--overlap allow` gets its Run anyway."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("skip"))
        assert isinstance(await fire(env), Admitted)
        _cli(env, "trigger", "p/t")
        _cli(env, "trigger", "p/t", "--overlap", "allow")
        await (await _requests_pass(env)).run()
        rows = await env.su(
            "SELECT overlap, state, admitted, overlap_skipped FROM qlsched.control_requests"
            " ORDER BY created_at_ms, overlap NULLS FIRST"
        )
        assert [tuple(r) for r in rows] == [(None, "done", 0, 1), ("allow", "done", 1, 0)]
        assert await states(env) == ["queued", "queued"]
        status = run_cli(["status", "--dsn", env.db.observer_dsn])
        assert "overlap-skipped" in status.stdout, (status.stdout, status.stderr)


async def test_a_backfill_under_buffer_one_queues_one_and_holds_one(pg_db: TestDatabase) -> None:
    """Rule: a backfill of a `buffer_one` trigger with nothing unfinished admits its first
    occurrence queued and its second held, and counts the rest overlap-skipped; admitted +
    already admitted + overlap-skipped is the request's total, and it ends done."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("buffer_one"))
        await env.make_due(ids=["t"])
        now = await env.now_ms()
        _cli(env, "backfill", "p/t", "--from", _iso(now - 360_000), "--to", _iso(now - 61_000))
        rp = await _requests_pass(env)
        for _ in range(3):
            await rp.run()
        [row] = await env.su("SELECT * FROM qlsched.control_requests")
        assert row["state"] == "done"
        assert (row["admitted"], row["already_admitted"]) == (2, 0)
        assert row["overlap_skipped"] == row["total"] - 2
        assert row["total"] >= 4
        assert sorted(await states(env)) == ["held", "queued"]


def test_a_request_asking_another_overlap_is_refused(pg_db: TestDatabase) -> None:
    """Rule: `--overlap` takes only `allow` (exit 2, one line, nothing recorded); the admin
    API refuses any other value with ControlError."""
    result = run_cli(["trigger", "p/t", "--overlap", "skip", "--dsn", pg_db.admin_dsn])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--overlap" in result.stderr
    with pytest.raises(ControlError, match="only 'allow'"):
        trio.run(partial(trigger_now, pg_db.admin_dsn, "p/t", overlap="skip"))


async def test_a_backfill_retention_caught_up_with_is_refused_at_admit(
    pg_db: TestDatabase,
) -> None:
    """Rule: a backfill recorded inside the retention horizon whose occurrences' Runs
    retention then deleted (their keys are free again) is refused `before_retention` when a
    replica would admit the chunk: none of those occurrences runs a second time."""
    async with open_env(pg_db) as env:
        await env.publish(policy_file("allow"))
        await env.make_due(ids=["t"])
        now = await env.now_ms()
        _cli(env, "backfill", "p/t", "--from", _iso(now - 360_000), "--to", _iso(now - 61_000))
        # Retention deleted Runs of the trigger up to the backfill's last minute since.
        await env.su_exec(
            "INSERT INTO qlsched.retention_pruned (project_id, trigger_id, trigger_revision,"
            " runs, attempts, events, marks, window_runs, through_ms)"
            " VALUES ('p', 't', 1, 1, 1, 2, 0, 0, $1)",
            now - 120_000,
        )
        await (await _requests_pass(env)).run()
        [row] = await env.su("SELECT state, refused_reason, admitted FROM qlsched.control_requests")
        assert tuple(row) == ("refused", "before_retention", 0)
        assert await states(env) == []
