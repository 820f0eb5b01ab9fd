"""The recovery source and marking on PostgreSQL (docs/contract.md §5 "Startup recovery").

Every case starts from a real admitted Run (the pristine shape admission writes) and drifts
exactly one thing as the superuser, the way a dispatcher or worker would have.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import trio

from qlsched.core.outcomes import Admitted
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query as query_text
from qlsched.postgres.recovery import RecoveryCandidate, recover, recovery_candidates
from tests.integration.adapter_support import LEASE_MS, Env, fire_for, one_project


async def admitted(env: Env, n: int = 1) -> list[Admitted]:
    """``n`` Runs admitted through the real claim and admit (pristine Attempts)."""
    await env.publish(one_project(n))
    await env.make_due()
    claims = await env.store.claim("r1", n, LEASE_MS)
    outcomes = await env.store.admit([fire_for(c) for c in claims])
    assert all(isinstance(o, Admitted) for o in outcomes)
    return [o for o in outcomes if isinstance(o, Admitted)]


async def candidates(env: Env) -> list[RecoveryCandidate]:
    """The recovery source as the runtime role reads it."""
    return await env.runtime(recovery_candidates)


ATTEMPT_DRIFT = {
    "worker_id": "UPDATE qlsched.attempts SET worker_id = 'w-1' WHERE attempt_id = $1",
    "session_id": "UPDATE qlsched.attempts SET session_id = 's-1' WHERE attempt_id = $1",
    "lease_id": "UPDATE qlsched.attempts SET lease_id = 'l-1' WHERE attempt_id = $1",
    "offer_id": "UPDATE qlsched.attempts SET offer_id = 'o-1' WHERE attempt_id = $1",
    "callback_token": "UPDATE qlsched.attempts SET callback_token = 'c' WHERE attempt_id = $1",
    "started_at_ms": "UPDATE qlsched.attempts SET started_at_ms = 1 WHERE attempt_id = $1",
    "result": "UPDATE qlsched.attempts SET result = 'ok' WHERE attempt_id = $1",
    "error": "UPDATE qlsched.attempts SET error = '' WHERE attempt_id = $1",
    "attempt_dispatching": "UPDATE qlsched.attempts SET state = 'dispatching'"
    " WHERE attempt_id = $1",
    "attempt_running": "UPDATE qlsched.attempts SET state = 'running' WHERE attempt_id = $1",
    "executor_kind": "UPDATE qlsched.attempts SET executor_kind = 'local_shell'"
    " WHERE attempt_id = $1",
}
RUN_DRIFT = {
    "cancel_requested": "UPDATE qlsched.runs SET cancel_requested = true WHERE run_id = $1",
    "run_dispatching": "UPDATE qlsched.runs SET state = 'dispatching' WHERE run_id = $1",
    "run_running": "UPDATE qlsched.runs SET state = 'running' WHERE run_id = $1",
    "run_succeeded": "UPDATE qlsched.runs SET state = 'succeeded' WHERE run_id = $1",
    "queued_at_missing": "UPDATE qlsched.runs SET queued_at_ms = NULL WHERE run_id = $1",
}


async def test_pristine_admitted_attempt_is_not_a_candidate(env: Env) -> None:
    """An Attempt exactly as admission wrote it (Run queued, not cancelled, queued_at_ms set;
    Attempt the latest, claimed, remote_worker, every worker/session/lease/offer/callback/
    start/result/error field NULL) is left to the dispatcher: the source is empty and
    recovery marks nothing."""
    await admitted(env, 3)

    assert await candidates(env) == []
    report = await recover(env.claim_db, replica="r1")
    assert (report.candidates, report.marked) == ([], 0)


@pytest.mark.parametrize("reason", sorted(ATTEMPT_DRIFT))
async def test_attempt_drift_makes_a_candidate(env: Env, reason: str) -> None:
    """One drifted Attempt field (any worker/session/lease/offer/callback/start/result/error
    value, even an empty string; state dispatching or running; another executor) makes that
    Attempt, and only it, a candidate whose reason names the drift."""
    [drifted, pristine] = await admitted(env, 2)
    await env.su_exec(ATTEMPT_DRIFT[reason], drifted.attempt_id)

    found = await candidates(env)

    assert found == [RecoveryCandidate(drifted.attempt_id, drifted.run_id, reason)]
    assert pristine.attempt_id not in {c.attempt_id for c in found}


@pytest.mark.parametrize("reason", sorted(RUN_DRIFT))
async def test_run_drift_makes_a_candidate(env: Env, reason: str) -> None:
    """A parent Run that is no longer pristine (cancel requested, state not queued, no
    queued_at_ms) makes its claimed Attempt a candidate with that reason."""
    [drifted, _] = await admitted(env, 2)
    await env.su_exec(RUN_DRIFT[reason], drifted.run_id)

    assert await candidates(env) == [RecoveryCandidate(drifted.attempt_id, drifted.run_id, reason)]


async def test_a_newer_attempt_makes_the_older_one_a_candidate(env: Env) -> None:
    """When a Run has a newer Attempt, its older non-terminal Attempt is a candidate
    ('newer_attempt'), while the newer one, itself pristine, is not."""
    [run] = await admitted(env)
    newer = uuid.uuid4()
    await env.su_exec(
        "INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,"
        " created_at_ms) VALUES ($1, $2, 2, 'remote_worker', 'claimed', 0)",
        newer,
        run.run_id,
    )

    assert await candidates(env) == [RecoveryCandidate(run.attempt_id, run.run_id, "newer_attempt")]


@pytest.mark.parametrize("state", ["succeeded", "failed", "lost"])
async def test_terminal_attempts_are_not_candidates(env: Env, state: str) -> None:
    """Terminal Attempts (succeeded, failed, lost) are not recovery's business, whatever
    else drifted on them."""
    [run] = await admitted(env)
    await env.su_exec(
        "UPDATE qlsched.attempts SET state = $2, worker_id = 'w', result = 'x'"
        " WHERE attempt_id = $1",
        run.attempt_id,
        state,
    )

    assert await candidates(env) == []


async def test_marking_is_idempotent_and_leaves_attempts_alone(env: Env) -> None:
    """Recovery marks each candidate once, with its reason and replica, in recovery_marks,
    and never rewrites the Attempt; running it again (or from another replica) finds no
    candidate and marks nothing; pristine work is never marked."""
    runs = await admitted(env, 3)
    await env.su_exec(ATTEMPT_DRIFT["worker_id"], runs[0].attempt_id)
    await env.su_exec(RUN_DRIFT["cancel_requested"], runs[1].run_id)
    attempts_before = await env.su(
        "SELECT xmin::text AS xmin, * FROM qlsched.attempts ORDER BY attempt_id"
    )

    first = await recover(env.claim_db, replica="r1")
    second = await recover(env.claim_db, replica="r2")

    expected = sorted(
        [
            RecoveryCandidate(runs[0].attempt_id, runs[0].run_id, "worker_id"),
            RecoveryCandidate(runs[1].attempt_id, runs[1].run_id, "cancel_requested"),
        ],
        key=lambda c: c.attempt_id,
    )
    assert (first.candidates, first.marked) == (expected, 2)
    assert (second.candidates, second.marked) == ([], 0)
    marks = await env.su(
        "SELECT attempt_id, run_id, reason, marked_by FROM qlsched.recovery_marks"
        " ORDER BY attempt_id"
    )
    assert [(m["attempt_id"], m["run_id"], m["reason"], m["marked_by"]) for m in marks] == [
        (c.attempt_id, c.run_id, c.reason, "r1") for c in expected
    ]
    assert (
        await env.su("SELECT xmin::text AS xmin, * FROM qlsched.attempts ORDER BY attempt_id")
        == attempts_before
    )


async def test_concurrent_recoveries_mark_each_candidate_once(env: Env) -> None:
    """Two replicas recovering at the same time both see the candidates, and the marks land
    exactly once each (no error, no duplicate): marking is safe to race."""
    runs = await admitted(env, 4)
    for r in runs:
        await env.su_exec(ATTEMPT_DRIFT["lease_id"], r.attempt_id)
    other_claim_db, _ = await env.open_pools()
    holder = await env.connect()
    await holder.execute("BEGIN")
    await holder.execute("LOCK TABLE qlsched.recovery_marks IN SHARE MODE")
    reports: dict[str, Any] = {}

    async def recovering(replica: str, db: Any) -> None:
        reports[replica] = await recover(db, replica=replica)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(recovering, "r1", env.claim_db)
        nursery.start_soon(recovering, "r2", other_claim_db)
        await env.wait_lock_waiters(2)
        await holder.execute("COMMIT")

    assert len(reports["r1"].candidates) == len(reports["r2"].candidates) == 4
    assert reports["r1"].marked + reports["r2"].marked == 4
    assert await env.su_val("SELECT count(*) FROM qlsched.recovery_marks") == 4
    assert await candidates(env) == []


async def test_recovery_runs_with_the_runtime_role_only(env: Env) -> None:
    """The recovery source and the marks need nothing beyond the runtime role's grants (the
    role startup recovery runs as): reading and marking succeed there."""
    [run] = await admitted(env)
    await env.su_exec(ATTEMPT_DRIFT["offer_id"], run.attempt_id)

    async def who(conn: Connection) -> str:
        return str(await conn.fetchval("SELECT current_user"))

    assert await env.runtime(who) == "qlsched_runtime"
    report = await recover(env.claim_db, replica="r1")
    assert report.marked == 1


HISTORY = 200_000


async def test_recovery_cost_follows_live_work_not_history(env: Env) -> None:
    """Rule (issue #14, hole 4): startup recovery reads only non-terminal Attempts, through
    an index: with 200,000 terminal Attempts in the history and one drifted live Attempt,
    the recovery source touches a handful of pages (no scan, no aggregate over the history)
    and still finds that one candidate. It read every attempt ever before, and at a million
    a replica's first start hit the runtime role's statement timeout."""
    [live] = await admitted(env)
    await env.su_exec(
        "UPDATE qlsched.attempts SET state = 'dispatching' WHERE attempt_id = $1",
        live.attempt_id,
    )
    await env.su_exec(
        "INSERT INTO qlsched.runs SELECT gen_random_uuid(), r.project_id, r.trigger_id,"
        " r.trigger_revision, r.task_id, r.task_revision, r.execution_revision_id, g,"
        " 'history:' || g, 'succeeded', 'runtime', g, false, g, r.admitted_by_owner,"
        " r.admitted_claim_token, r.admitted_claim_version"
        " FROM qlsched.runs AS r, generate_series(1, $1) AS g",
        HISTORY,
    )
    await env.su_exec(
        "INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,"
        " created_at_ms) SELECT gen_random_uuid(), r.run_id, 1, 'remote_worker', 'succeeded',"
        " r.created_at_ms FROM qlsched.runs AS r WHERE r.state = 'succeeded'"
    )
    await env.su_exec("ANALYZE qlsched.runs; ANALYZE qlsched.attempts")

    async def explain(conn: Connection) -> Any:
        await conn.execute("SET enable_seqscan = off")  # as a replica's pools run
        return await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query_text("recovery_candidates")
        )

    [plan] = json.loads(await env.runtime(explain))
    nodes = list(walk(plan["Plan"]))
    assert not [n for n in nodes if n["Node Type"] in ("Seq Scan", "Aggregate", "HashAggregate")]
    assert "attempts_live_idx" in {n.get("Index Name") for n in nodes}
    touched = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
    assert touched < 50, touched
    assert [c.attempt_id for c in await candidates(env)] == [live.attempt_id]


def walk(node: dict[str, Any]) -> Any:
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)
