"""Trigger-now and backfill requests on PostgreSQL (docs/contract.md §10): recorded by the
admin, admitted by the replicas' requests pass under a fence, exactly once.

Each test drives the product's own pieces (``record_*`` as the admin role, the
``RequestsPass`` over ``PostgresRequestStore`` as the runtime role) on a fresh database;
faults with real processes are in ``tests/faults/test_request_faults.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.core.config import Config
from qlsched.core.keys import idempotency_key, manual_key
from qlsched.core.requests import (
    NotRecorded,
    Recorded,
    RecordResult,
    RequestAdmitted,
    RequestClaims,
    RequestFenceLost,
    RequestWaiting,
)
from qlsched.postgres.pool import Connection
from qlsched.postgres.requests import (
    PostgresRequestStore,
    record_backfill,
    record_trigger_now,
)
from tests.integration.adapter_support import (
    MINUTE_MS,
    Env,
    PublishFile,
    one_project,
    open_env,
    run_round,
    trigger,
)
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

YEARLY = "0 0 1 1 *"
"""A cron that never comes due during a test: every admit seen is a request's."""


def _config(owner: str = "r1", budget: int = 16) -> Config:
    return Config(owner=owner, claim_budget=budget)


async def _pass(
    env: Env, owner: str = "r1", budget: int = 16, *, metrics: Metrics | None = None
) -> RequestsPass:
    """A replica's requests pass (its own pools), looking every round."""
    claim_db, admit_db = await env.open_pools()
    store = PostgresRequestStore(claim_db, admit_db, sink=env.sink)
    return RequestsPass(
        store,
        _config(owner, budget),
        MemorySink(),
        metrics or Metrics(),
        budget=budget,
        poll_s=0.0,
    )


async def _trigger_now(env: Env, project: str = "p", trigger_id: str = "t0000") -> RecordResult:
    async def fn(conn: Connection) -> RecordResult:
        return await record_trigger_now(conn, project, trigger_id, note="why", actor="ops")

    return await env.admin(fn)


async def _backfill(
    env: Env, from_ms: int, to_ms: int, *, max_occurrences: int = 10_000, trigger_id: str = "t0000"
) -> RecordResult:
    async def fn(conn: Connection) -> RecordResult:
        return await record_backfill(
            conn, "p", trigger_id, from_ms=from_ms, to_ms=to_ms, max_occurrences=max_occurrences
        )

    return await env.admin(fn)


async def _request(env: Env, request_id: uuid.UUID) -> dict[str, Any]:
    [row] = await env.su("SELECT * FROM qlsched.control_requests WHERE request_id = $1", request_id)
    return dict(row)


async def _keys(env: Env) -> list[str]:
    rows = await env.su("SELECT idempotency_key FROM qlsched.runs ORDER BY scheduled_for_ms")
    return [r[0] for r in rows]


async def _expire(env: Env) -> None:
    """Move every request claim's expiry just into the database's past."""
    await env.su_exec(
        "UPDATE qlsched.control_requests SET claim_expires_at_ms ="
        " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1"
        " WHERE claim_token IS NOT NULL"
    )


def _file(cron: str = YEARLY, **kwargs: Any) -> PublishFile:
    f = one_project(ids=["t0000"], cron=cron)
    if kwargs:
        f = msgspec.structs.replace(f, triggers=[trigger("p", "t0000", cron=cron, **kwargs)])
    return f


# --- trigger now -----------------------------------------------------------------------------


async def test_trigger_now_admits_one_run_under_its_manual_key_and_leaves_the_cursor(
    pg_db: TestDatabase,
) -> None:
    """Rule: a trigger-now request becomes exactly one queued Run keyed
    ql3:manual:v1:<trigger>:<revision>:<request>, scheduled for the request's database time,
    with its pristine Attempt and two events; the request is done; the schedule row is not
    written (its cursor and xmin unchanged); a second pass admits nothing."""
    async with open_env(pg_db) as env:
        await env.publish(_file())
        before = await env.schedule("p", "t0000")
        recorded = await _trigger_now(env)
        assert isinstance(recorded, Recorded)
        row = await _request(env, recorded.request_id)
        assert (row["state"], row["requested_by"], row["note"], row["actor"]) == (
            "pending",
            "qlsched_admin",
            "why",
            "ops",
        )
        rp = await _pass(env)
        stats = await rp.run()
        assert (stats.claimed, stats.admitted) == (1, 1)
        key = manual_key("t0000", recorded.trigger_revision, recorded.request_id)
        runs = await env.su("SELECT * FROM qlsched.runs")
        assert [r["idempotency_key"] for r in runs] == [key]
        assert runs[0]["scheduled_for_ms"] == recorded.created_at_ms
        assert runs[0]["admitted_by_owner"] == "r1"
        assert await env.counts() == type(await env.counts())(runs=1, attempts=1, events=2)
        done = await _request(env, recorded.request_id)
        assert (done["state"], done["admitted"], done["claim_token"]) == ("done", 1, None)
        after = await env.schedule("p", "t0000")
        assert (after["xmin"], after["next_fire_at_ms"]) == (
            before["xmin"],
            before["next_fire_at_ms"],
        )
        again = await rp.run()
        assert (again.claimed, again.admitted) == (0, 0)
        assert len(await _keys(env)) == 1
        [action] = await env.su("SELECT * FROM qlsched.schedule_actions")
        assert (
            action["kind"],
            action["actor"],
            action["actor_label"],
            action["note"],
            action["occurrences"],
            action["trigger_revision"],
        ) == ("trigger", "qlsched_admin", "ops", "why", 1, recorded.trigger_revision)
        assert msgspec.json.decode(action["detail"])["request_id"] == str(recorded.request_id)


async def test_a_request_for_a_disabled_archived_or_missing_trigger_is_refused_at_once(
    pg_db: TestDatabase,
) -> None:
    """Rule: trigger-now (and backfill) of a disabled trigger, of an archived project's
    trigger, or of no trigger at all is refused before anything is recorded, with the
    reason; no request row exists afterwards."""
    async with open_env(pg_db) as env:
        await env.publish(_file(enabled=False))
        disabled = await _trigger_now(env)
        assert isinstance(disabled, NotRecorded)
        assert disabled.reason == "trigger_disabled"
        assert "disabled" in disabled.message()
        missing = await _trigger_now(env, trigger_id="nope")
        assert isinstance(missing, NotRecorded)
        assert missing.reason == "trigger_missing"
        await env.publish(one_project(ids=["t0000"], cron=YEARLY, archived=True))
        archived = await _trigger_now(env)
        assert isinstance(archived, NotRecorded)
        assert archived.reason == "project_archived"
        now = await env.now_ms()
        back = await _backfill(env, now - 10 * MINUTE_MS, now)
        assert isinstance(back, NotRecorded)
        assert back.reason == "project_archived"
        assert await env.su_val("SELECT count(*) FROM qlsched.control_requests") == 0
        assert await env.su_val("SELECT count(*) FROM qlsched.schedule_actions") == 0


async def test_a_republish_before_admission_refuses_the_request(pg_db: TestDatabase) -> None:
    """Rule: a request is for the revision current when it was made; re-published with a
    change before a replica admits it, it is refused (revision_changed) and nothing runs.
    Disabled after the request, it is refused as trigger_disabled."""
    async with open_env(pg_db) as env:
        await env.publish(_file())
        rp = await _pass(env)
        first = await _trigger_now(env)
        await env.publish(_file(cron="0 0 2 1 *"))
        await rp.run()
        second = await _trigger_now(env)
        await env.publish(_file(cron="0 0 2 1 *", enabled=False))
        await rp.run()
        assert isinstance(first, Recorded)
        assert isinstance(second, Recorded)
        a, b = await _request(env, first.request_id), await _request(env, second.request_id)
        assert (a["state"], a["refused_reason"]) == ("refused", "revision_changed")
        assert (b["state"], b["refused_reason"]) == ("refused", "trigger_disabled")
        assert await _keys(env) == []


async def test_a_stale_replica_cannot_admit_after_a_takeover(pg_db: TestDatabase) -> None:
    """Rule: a request claim taken over after its lease expired fences the old holder out:
    its admit, sent while the new holder holds the claim, is refused (request_fence_lost)
    and admits nothing; the new holder admits the one Run; sent again after that, the old
    admit is still refused."""
    async with open_env(pg_db) as env:
        await env.publish(_file())
        recorded = await _trigger_now(env)
        assert isinstance(recorded, Recorded)
        stores = []
        for _ in range(2):
            claim_db, admit_db = await env.open_pools()
            stores.append(PostgresRequestStore(claim_db, admit_db))
        old_store, new_store = stores
        [held] = (await old_store.claim("old", 16, 30_000)).claims
        await _expire(env)
        [taken] = (await new_store.claim("new", 16, 30_000)).claims
        assert taken.fence.version == held.fence.version + 1
        maker = RequestsPass(old_store, _config("old"), MemorySink(), Metrics(), budget=16)
        late, fresh = maker.chunk_for(held), maker.chunk_for(taken)
        assert late is not None
        assert fresh is not None
        assert isinstance(await old_store.admit(late), RequestFenceLost)
        assert await _keys(env) == []
        admitted = await new_store.admit(fresh)
        assert isinstance(admitted, RequestAdmitted)
        assert admitted.admitted == 1
        assert isinstance(await old_store.admit(late), RequestFenceLost)
        runs = await env.su("SELECT admitted_by_owner, admitted_claim_version FROM qlsched.runs")
        assert [(r[0], r[1]) for r in runs] == [("new", held.fence.version + 1)]


# --- backfill --------------------------------------------------------------------------------


async def test_backfill_admits_in_chunks_of_the_budget_with_a_durable_cursor(
    pg_db: TestDatabase,
) -> None:
    """Rule: a backfill's occurrences (the trigger's own cron) are admitted at most the claim
    budget per request per round, each under its cron key; the request's cursor and counts
    move with each chunk and it is done after the last; nothing is admitted twice."""
    async with open_env(pg_db) as env:
        await env.publish(_file(cron="* * * * *"))
        await run_round(env.store, "cron", 16, 30_000)  # cron initialises its cursor
        now = await env.now_ms()
        start = (now // MINUTE_MS - 50) * MINUTE_MS
        end = start + 39 * MINUTE_MS  # 40 occurrences
        recorded = await _backfill(env, start, end)
        assert isinstance(recorded, Recorded)
        assert recorded.total == 40
        [action] = await env.su("SELECT kind, occurrences, detail FROM qlsched.schedule_actions")
        assert (action["kind"], action["occurrences"]) == ("backfill", 40)
        assert msgspec.json.decode(action["detail"]) == {
            "request_id": str(recorded.request_id),
            "from_ms": start,
            "to_ms": end,
        }
        totals = await env.su(
            "SELECT kind, actions, occurrences FROM qlsched.schedule_action_totals"
        )
        assert [tuple(t) for t in totals] == [("backfill", 1, 40)]
        rp = await _pass(env, budget=16)
        seen = []
        for _ in range(4):
            stats = await rp.run()
            row = await _request(env, recorded.request_id)
            seen.append((stats.admitted, row["admitted"], row["cursor_ms"], row["state"]))
        assert seen == [
            (16, 16, start + 15 * MINUTE_MS, "pending"),
            (16, 32, start + 31 * MINUTE_MS, "pending"),
            (8, 40, end, "done"),
            (0, 40, end, "done"),
        ]
        rev = recorded.trigger_revision
        assert await _keys(env) == [
            idempotency_key("t0000", rev, start + i * MINUTE_MS) for i in range(40)
        ]


@pytest.mark.parametrize(("dst_fold", "instants"), [("first", 1), ("both", 2)])
async def test_backfill_enumerates_by_the_triggers_dst_policy(
    pg_db: TestDatabase, dst_fold: str, instants: int
) -> None:
    """Rule: a backfill counts and admits the occurrences the trigger's own DST policy gives:
    01:30 in New York on the fold of 2026-11-01 is one occurrence under ``first`` and two
    (05:30Z and 06:30Z, two keys) under ``both``."""
    fold_first = 1_793_511_000_000  # 2026-11-01T05:30:00Z, 01:30 EDT
    hour = 60 * MINUTE_MS
    async with open_env(pg_db) as env:
        await env.publish(_file(cron="30 1 * * *", timezone="America/New_York", dst_fold=dst_fold))
        await env.set_cursor("p", "t0000", fold_first + 3 * hour)
        recorded = await _backfill(env, fold_first - hour, fold_first + 2 * hour)
        assert isinstance(recorded, Recorded)
        assert recorded.total == instants
        rp = await _pass(env)
        await rp.run()
        rev = recorded.trigger_revision
        assert await _keys(env) == [
            idempotency_key("t0000", rev, fold_first + i * hour) for i in range(instants)
        ]


async def test_backfill_over_a_range_cron_partly_admitted_counts_and_never_duplicates(
    pg_db: TestDatabase,
) -> None:
    """Rule: an occurrence cron already admitted is refused by its key and counted as
    already_admitted; every other occurrence of the range gets exactly one Run."""
    async with open_env(pg_db) as env:
        await env.publish(
            PublishFile(
                projects=one_project().projects,
                tasks=one_project().tasks,
                triggers=[trigger("p", "t0000", misfire="fire_once")],
            )
        )
        now = await env.now_ms()
        start = (now // MINUTE_MS - 20) * MINUTE_MS
        cron_admitted = [start + 2 * MINUTE_MS, start + 5 * MINUTE_MS]
        for t in cron_admitted:  # cron fires these itself (fire_once: late, still one Run)
            await env.set_cursor("p", "t0000", t)
            result = await run_round(env.store, "cron", 16, 30_000)
            assert [type(o).__name__ for o in result.outcomes] == ["Admitted"]
        recorded = await _backfill(env, start, start + 9 * MINUTE_MS)
        assert isinstance(recorded, Recorded)
        rp = await _pass(env)
        stats = await rp.run()
        assert (stats.admitted, stats.already_admitted) == (8, 2)
        row = await _request(env, recorded.request_id)
        assert (row["state"], row["admitted"], row["already_admitted"]) == ("done", 8, 2)
        keys = await _keys(env)
        rev = recorded.trigger_revision
        assert sorted(keys) == sorted(
            idempotency_key("t0000", rev, start + i * MINUTE_MS) for i in range(10)
        )
        owners = await env.su(
            "SELECT admitted_by_owner, count(*)::int FROM qlsched.runs GROUP BY 1 ORDER BY 1"
        )
        assert [(r[0], r[1]) for r in owners] == [("cron", 2), ("r1", 8)]


async def test_backfill_stops_at_the_cron_cursor_and_goes_on_once_cron_passed(
    pg_db: TestDatabase,
) -> None:
    """Rule: a backfill never admits an occurrence at or after the trigger's cron cursor
    (cron's to fire, skip or count); it waits there, pending, and admits the rest once the
    cursor has moved past them."""
    async with open_env(pg_db) as env:
        await env.publish(_file(cron="* * * * *"))
        now = await env.now_ms()
        start = (now // MINUTE_MS - 10) * MINUTE_MS
        await env.set_cursor("p", "t0000", start + 4 * MINUTE_MS)
        recorded = await _backfill(env, start, start + 7 * MINUTE_MS)
        assert isinstance(recorded, Recorded)
        rp = await _pass(env)
        assert (await rp.run()).admitted == 4
        assert (await rp.run()).admitted == 0
        row = await _request(env, recorded.request_id)
        assert (row["state"], row["cursor_ms"], row["claim_token"]) == (
            "pending",
            start + 3 * MINUTE_MS,
            None,
        )
        assert row["next_ms"] == start + 4 * MINUTE_MS  # what it waits for
        # Waiting, it takes no claim slot: no replica claims it until cron is past it.
        claim_db, admit_db = await env.open_pools()
        store = PostgresRequestStore(claim_db, admit_db)
        assert await store.claim("r2", 16, 30_000) == RequestClaims(any_pending=False, claims=[])
        # The database re-checks: a chunk reaching the cursor (a replica with a stale or
        # wrong idea of it) admits nothing and leaves the request where it was.
        await env.set_cursor("p", "t0000", start + 9 * MINUTE_MS)
        [claim] = (await store.claim("r2", 16, 30_000)).claims
        await env.set_cursor("p", "t0000", start + 4 * MINUTE_MS)
        chunk = RequestsPass(store, _config("r2"), MemorySink(), Metrics(), budget=16).chunk_for(
            claim
        )
        assert chunk is not None
        assert chunk.occurrences[-1] == start + 7 * MINUTE_MS
        assert isinstance(await store.admit(chunk), RequestWaiting)
        assert len(await _keys(env)) == 4
        assert (await _request(env, recorded.request_id))["claim_token"] is None
        await env.set_cursor("p", "t0000", start + 8 * MINUTE_MS)
        assert (await rp.run()).admitted == 4
        assert (await _request(env, recorded.request_id))["state"] == "done"
        assert len(await _keys(env)) == 8


async def test_backfill_above_max_is_refused_with_the_exact_count(pg_db: TestDatabase) -> None:
    """Rule: a range holding more occurrences than --max is refused before anything is
    recorded, with the exact count (by the cron counter, not by stepping); a range ending
    after the database's now is refused too."""
    async with open_env(pg_db) as env:
        await env.publish(_file(cron="* * * * * *"))
        now = await env.now_ms()
        start = (now // 1000 - 86_400 * 30) * 1000
        refused = await _backfill(env, start, start + 86_400_000 - 1000, max_occurrences=10_000)
        assert isinstance(refused, NotRecorded)
        assert (refused.reason, refused.count, refused.max) == ("too_many", 86_400, 10_000)
        assert "86,400 occurrences" in refused.message()
        future = await _backfill(env, now - 1000, now + 60_000)
        assert isinstance(future, NotRecorded)
        assert future.reason == "future"
        assert await env.su_val("SELECT count(*) FROM qlsched.control_requests") == 0


# --- cost when idle --------------------------------------------------------------------------


async def test_the_pass_sends_nothing_until_its_poll_is_due_when_no_request_is_pending(
    pg_db: TestDatabase,
) -> None:
    """Rule: once a look found no pending request, the pass sends no statement until its
    poll timer is due; while a request is pending it looks every round."""
    async with open_env(pg_db) as env:
        await env.publish(_file())
        claim_db, admit_db = await env.open_pools()
        store = PostgresRequestStore(claim_db, admit_db)
        rp = RequestsPass(store, _config(), MemorySink(), Metrics(), budget=16, poll_s=3600)
        assert (await rp.run()).looked
        sent = store.statements
        for _ in range(5):
            assert not (await rp.run()).looked
        assert store.statements == sent
        recorded = await _trigger_now(env)
        assert isinstance(recorded, Recorded)
        assert not (await rp.run()).looked  # no signal but the timer: a later round looks
        rp.poll.again()
        stats = await rp.run()
        assert (stats.looked, stats.admitted) == (True, 1)
        assert (await rp.run()).looked  # the last look saw a pending request: look again
        assert not (await rp.run()).looked


async def test_outcome_counts_reach_the_metrics(pg_db: TestDatabase) -> None:
    """Rule: each request admit is counted by outcome, and its occurrences as admitted or
    already admitted."""
    async with open_env(pg_db) as env:
        await env.publish(_file())
        await _trigger_now(env)
        metrics = Metrics()
        rp = await _pass(env, metrics=metrics)
        await rp.run()
        registry = metrics.registry
        code = {"code": "request_admitted", "profile": "cluster"}
        result = {"result": "admitted", "profile": "cluster"}
        assert registry.get_sample_value("qlsched_request_outcomes_total", code) == 1
        assert registry.get_sample_value("qlsched_request_occurrences_total", result) == 1
