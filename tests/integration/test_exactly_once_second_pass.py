"""Exactly once, second pass: each finding of the review, replayed on real PostgreSQL.

The operator's side is the CLI (``pause``, ``resume``, ``trigger``, ``backfill`` as
subprocesses on the admin DSN); the replica's side is its own statements (a cron round, the
requests pass), driven in-process so each step lands where the finding needs it. Each test
names the class it pins:

- a key another path took is never a retry loop (cron moves past it);
- a backfill never takes an occurrence cron is still to decide (a NULL cursor waits);
- work that cannot progress holds no claim slot (waiting backfills, held requests);
- nothing of a paused trigger is admitted, from any path;
- a request that cannot succeed is refused with its reason, never retried forever;
- uninitialised rows share the claim budget with due rows;
- every occurrence in exactly one bucket.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.core.config import Config
from qlsched.core.keys import idempotency_key
from qlsched.core.outcomes import Admitted, AlreadyAdmitted, Initialize, Initialized, StoreFailed
from qlsched.core.requests import RequestHeld, RequestRefused
from qlsched.core.store import FailingCounts
from qlsched.postgres.pool import Connection
from qlsched.postgres.reader import PostgresReader
from qlsched.postgres.requests import PostgresRequestStore, record_trigger_now
from qlsched.tools.accounting import account, unbalanced
from tests.integration.adapter_support import (
    Env,
    decision_for,
    one_project,
    open_env,
    run_round,
    trigger,
)
from tests.integration.cluster_support import wait_until
from tests.integration.schema_support import run_cli
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

EVERY_SECOND = "* * * * * *"
LEASE_MS = 30_000
REF = "p/t0000"


def _cli(env: Env, *args: str) -> str:
    """One admin command as an operator runs it: exit 0, its stdout."""
    result = run_cli([*args, "--dsn", env.db.admin_dsn])
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


async def _pass(env: Env, owner: str = "r1") -> tuple[RequestsPass, PostgresRequestStore]:
    claim_db, admit_db = await env.open_pools()
    store = PostgresRequestStore(claim_db, admit_db, sink=env.sink)
    config = Config(owner=owner, claim_budget=16)
    return RequestsPass(store, config, MemorySink(), Metrics(), budget=16, poll_s=0.0), store


async def _wait_db_time(env: Env, at_least_ms: int) -> None:
    """Wait until the database's clock reaches ``at_least_ms`` (a condition, not a guess)."""

    async def reached() -> bool:
        return await env.now_ms() >= at_least_ms

    await wait_until(reached, timeout_s=30)


async def _runs_per_key(env: Env) -> dict[str, int]:
    rows = await env.su("SELECT idempotency_key, count(*)::int AS n FROM qlsched.runs GROUP BY 1")
    return {r["idempotency_key"]: r["n"] for r in rows}


async def _schedule(env: Env) -> dict[str, Any]:
    return await env.schedule("p", "t0000")


async def _cron_rounds(env: Env, n: int) -> list[Any]:
    """``n`` cron rounds, each after the database clock passed the row's due time."""
    outcomes: list[Any] = []
    for _ in range(n):
        row = await _schedule(env)
        if row["next_fire_at_ms"] is not None:
            await _wait_db_time(env, row["next_fire_at_ms"] + 1)
        outcomes += (await run_round(env.store, "cron", 16, LEASE_MS)).outcomes
    return outcomes


async def _accounts_balance(env: Env) -> None:
    async def fn(conn: Connection) -> list[str]:
        return unbalanced(await account(conn))

    assert await env.su_call(fn) == []


def _no_taken_keys(outcomes: list[Any]) -> None:
    assert not [o for o in outcomes if isinstance(o, AlreadyAdmitted)], outcomes


async def test_a_backfill_inside_a_pause_then_a_fire_once_resume_never_wedges(
    pg_db: TestDatabase,
) -> None:
    """Finding 1 (CLI): a trigger paused before its first claim gets a backfill of the
    pause; ``resume --catch-up fire_once`` puts the cursor on the latest occurrence inside
    the pause. The backfill is held while paused (no Run), so that occurrence is cron's:
    cron admits it under its key and goes on firing; the backfill then admits only what
    lies before the cursor; every key has one Run and the buckets add up."""
    async with open_env(pg_db) as env:
        fire_once = trigger("p", "t0000", cron=EVERY_SECOND, misfire="fire_once")
        await env.publish(msgspec.structs.replace(one_project(), triggers=[fire_once]))
        _cli(env, "pause", REF, "--note", "before its first claim")
        assert (await _schedule(env))["next_fire_at_ms"] is None
        paused_at = await env.now_ms()
        await _wait_db_time(env, paused_at + 4_000)
        _cli(env, "backfill", REF, "--from", _iso(paused_at), "--to", _iso(paused_at + 3_000))
        rp, _ = await _pass(env)
        await rp.run()
        assert await _runs_per_key(env) == {}, "a paused trigger got a Run"
        _cli(env, "resume", REF, "--catch-up", "fire_once")
        latest = (await _schedule(env))["next_fire_at_ms"]
        outcomes = await _cron_rounds(env, 1)
        assert [type(o) for o in outcomes] == [Admitted]
        assert outcomes[0].scheduled_for_ms == latest
        await rp.run()
        outcomes = await _cron_rounds(env, 2)
        assert [type(o) for o in outcomes] == [Admitted, Admitted]
        per_key = await _runs_per_key(env)
        assert set(per_key.values()) == {1}
        rev = (await _schedule(env))["trigger_revision"]
        backfilled = [
            k for k in per_key if k < idempotency_key("t0000", rev, latest) and "cron" in k
        ]
        assert backfilled, "the backfill admitted nothing before the cursor"
        assert not [d for d in env.sink.items if d.sqlstate == "23505"]
        await _accounts_balance(env)


async def test_a_backfill_racing_an_initialize_waits_for_the_cursor(pg_db: TestDatabase) -> None:
    """Finding 2: while a replica's Initialize of a new revision is in flight (claimed, not
    yet written), a backfill of the last seconds is recorded. A NULL cursor is not "before
    now": the backfill takes no slot and admits nothing until the cursor is set; then it
    admits only occurrences before it, and cron's first Fire is its own (no key taken)."""
    async with open_env(pg_db) as env:
        await env.publish(one_project(ids=["t0000"], cron=EVERY_SECOND))
        [claim] = await env.store.claim("slow", 16, LEASE_MS)
        decision = decision_for(claim)
        assert isinstance(decision, Initialize)
        await _wait_db_time(env, claim.claimed_at_ms + 3_000)
        now = await env.now_ms()
        _cli(env, "backfill", REF, "--from", _iso(now - 6_000), "--to", _iso(now - 1_000))
        rp, _store = await _pass(env)
        stats = await rp.run()
        assert (stats.claimed, stats.admitted) == (0, 0)
        assert isinstance(await env.store.initialize(claim, decision), Initialized)
        await rp.run()
        cursor = (await _schedule(env))["next_fire_at_ms"]
        runs = await env.su("SELECT scheduled_for_ms FROM qlsched.runs")
        assert runs
        assert all(r["scheduled_for_ms"] < cursor for r in runs)
        outcomes = await _cron_rounds(env, 2)
        assert [type(o) for o in outcomes] == [Admitted, Admitted]
        assert set((await _runs_per_key(env)).values()) == {1}


async def test_waiting_backfills_hold_no_slot_and_trigger_now_never_waits(
    pg_db: TestDatabase,
) -> None:
    """Finding 3: twenty backfills that must wait for the cron cursor are never claimed
    (their claim version stays 0 over several passes), and a trigger-now recorded after
    them is admitted by the first pass with a budget of 16."""
    async with open_env(pg_db) as env:
        await env.publish(one_project(ids=["t0000"], cron=EVERY_SECOND))
        start = await env.now_ms() // 1000 * 1000 - 60_000
        await env.set_cursor("p", "t0000", start)  # cron is a minute behind
        await env.su_exec(
            "UPDATE qlsched.trigger_schedules SET active = false WHERE trigger_id = 't0000'"
        )
        for i in range(20):
            lo = start + 10_000 + i * 1_000
            _cli(env, "backfill", REF, "--from", _iso(lo), "--to", _iso(lo + 500))
        _cli(env, "trigger", REF, "--note", "now please")
        rp, store = await _pass(env)
        for _ in range(3):
            await rp.run()
        rows = await env.su("SELECT kind, state, claim_version FROM qlsched.control_requests")
        assert {(r["kind"], r["state"]) for r in rows} == {
            ("backfill", "pending"),
            ("trigger", "done"),
        }
        assert {r["claim_version"] for r in rows if r["kind"] == "backfill"} == {0}
        assert store.statements <= 3 + 1


async def test_nothing_of_a_paused_trigger_is_admitted_from_any_path(
    pg_db: TestDatabase,
) -> None:
    """Finding 4 (CLI): trigger-now and backfill requests recorded after ``pause`` returned
    admit nothing while paused (held: no claim slot, shown as held by ``status``), and run
    after ``resume``. A pause committing between a request's claim and its admit holds it
    too: the admit locks the schedule row and sees the pause."""
    async with open_env(pg_db) as env:
        await env.publish(one_project(ids=["t0000"], cron=EVERY_SECOND))
        await _cron_rounds(env, 1)  # initialised
        cursor = (await _schedule(env))["next_fire_at_ms"]
        _cli(env, "pause", REF)
        _cli(env, "trigger", REF)
        _cli(env, "backfill", REF, "--from", _iso(cursor - 5_000), "--to", _iso(cursor - 1_000))
        rp, store = await _pass(env)
        for _ in range(3):
            assert (await rp.run()).claimed == 0
        assert await _runs_per_key(env) == {}
        status = run_cli(["status", "--dsn", pg_db.observer_dsn])
        assert status.returncode == 0, status.stderr
        assert "held" in status.stdout
        _cli(env, "resume", REF)
        await rp.run()
        kinds = await env.su("SELECT kind, state FROM qlsched.control_requests ORDER BY kind")
        assert [(r["kind"], r["state"]) for r in kinds] == [
            ("backfill", "done"),
            ("trigger", "done"),
        ]
        before = len(await _runs_per_key(env))
        # The race: claimed before the pause, admitted after it committed.

        async def now_request(conn: Connection) -> Any:
            return await record_trigger_now(conn, "p", "t0000")

        await env.admin(now_request)
        [claim] = (await store.claim("r2", 16, LEASE_MS)).claims
        _cli(env, "pause", REF)
        chunk = rp.chunk_for(claim)
        assert chunk is not None
        assert isinstance(await store.admit(chunk), RequestHeld)
        assert len(await _runs_per_key(env)) == before


async def test_a_request_that_cannot_succeed_is_refused_not_retried(pg_db: TestDatabase) -> None:
    """Finding 6: a backfill whose chunks would count past its recorded total (the recorder
    and the replica disagree on the occurrences) is refused ``count_mismatch`` at its first
    admit, with no Run and no CHECK error; a trigger-now whose admit fails the same way
    every time is given back at once after each failure and refused ``failed_repeatedly``
    after five, with the SQLSTATE kept. Neither is claimed again."""
    async with open_env(pg_db) as env:
        await env.publish(one_project(ids=["t0000"], cron=EVERY_SECOND))
        await _cron_rounds(env, 1)
        cursor = (await _schedule(env))["next_fire_at_ms"]
        _cli(env, "backfill", REF, "--from", _iso(cursor - 10_000), "--to", _iso(cursor - 1_000))
        await env.su_exec("UPDATE qlsched.control_requests SET total = 4")
        rp, store = await _pass(env)
        await rp.run()
        [row] = await env.su("SELECT state, refused_reason, admitted FROM qlsched.control_requests")
        assert tuple(row) == ("refused", "count_mismatch", 0)
        assert await _runs_per_key(env) == {}
        await env.su_exec(
            "ALTER TABLE qlsched.runs ADD CONSTRAINT no_manual"
            " CHECK (idempotency_key NOT LIKE 'ql3:manual:%')"
        )
        _cli(env, "trigger", REF)
        outcomes = []
        for _ in range(7):
            batch = await store.claim("r1", 16, LEASE_MS)
            for c in batch.claims:
                chunk = rp.chunk_for(c)
                assert chunk is not None
                outcomes.append(await store.admit(chunk))
        assert len(outcomes) == 5
        assert outcomes[-1] == RequestRefused(
            outcomes[-1].request_id, "p", "t0000", reason="failed_repeatedly"
        )
        [req] = await env.su(
            "SELECT state, refused_reason, failures, last_failure FROM qlsched.control_requests"
            " WHERE kind = 'trigger'"
        )
        assert tuple(req) == ("refused", "failed_repeatedly", 5, "request_failed:23514")


async def test_a_large_publish_shares_the_claim_budget_with_due_rows(pg_db: TestDatabase) -> None:
    """Finding 7: with 300 new (uninitialised) triggers published beside 20 due ones, one
    claim of 16 takes the due rows first after a quarter reserved for new rows: at least 12
    due rows, so existing schedules keep firing while a large publish initialises."""
    async with open_env(pg_db) as env:
        due = [f"d{i:03}" for i in range(20)]
        await env.publish(one_project(ids=due))
        await env.make_due()
        await env.publish(one_project(ids=due + [f"n{i:03}" for i in range(300)]))
        claims = await env.store.claim("r1", 16, LEASE_MS)
        kinds = [c.cursor_ms is None for c in claims]
        assert len(claims) == 16
        assert kinds.count(False) == 12
        assert kinds.count(True) == 4


async def test_every_occurrence_lands_in_exactly_one_bucket(pg_db: TestDatabase) -> None:
    """Finding 8: an occurrence counted as paused that a backfill then admits is counted in
    ``backfilled_total`` too, so Runs + skipped + coalesced + paused - backfilled equals the
    cron's occurrences over the row's window, before and after the backfill."""
    async with open_env(pg_db) as env:
        await env.publish(one_project(ids=["t0000"], cron=EVERY_SECOND))
        await _cron_rounds(env, 3)
        _cli(env, "pause", REF)
        paused_at = await env.now_ms()
        await _wait_db_time(env, paused_at + 4_000)
        _cli(env, "resume", REF, "--catch-up", "skip")
        row = await _schedule(env)
        assert row["paused_total"] >= 3
        await _accounts_balance(env)
        _cli(
            env, "backfill", REF, "--from", _iso(paused_at - 1_000), "--to", _iso(paused_at + 3_000)
        )
        rp, _ = await _pass(env)
        await rp.run()
        row = await _schedule(env)
        assert row["backfilled_total"] >= 3
        await _cron_rounds(env, 2)
        await _accounts_balance(env)


async def test_a_row_failing_again_and_again_shows_as_stuck(pg_db: TestDatabase) -> None:
    """Nothing retried forever in silence: a trigger whose admit fails every time (an
    injected CHECK its Runs violate) gives its claim back after each failure, so three
    rounds fail it three times; ``status`` and ``check`` then name it stuck with the
    outcome and SQLSTATE, and the metrics scrape counts it. The next admit clears it."""
    async with open_env(pg_db) as env:
        await env.publish(one_project(ids=["t0000"], cron=EVERY_SECOND))
        await _cron_rounds(env, 1)
        await env.su_exec("ALTER TABLE qlsched.runs ADD CONSTRAINT no_t CHECK (false) NOT VALID")
        outcomes = await _cron_rounds(env, 3)
        assert [type(o) for o in outcomes] == [StoreFailed] * 3
        # Put right (readiness would name the intruder), the row still shows what happened.
        await env.su_exec("ALTER TABLE qlsched.runs DROP CONSTRAINT no_t")
        status = run_cli(["status", "--dsn", pg_db.observer_dsn])
        assert "stuck p/t0000: 3 admits failed in a row, last store_failed:23514" in (
            status.stdout
        ), status.stdout
        check = run_cli(["check", "--dsn", pg_db.runtime_dsn])
        assert "attention: stuck p/t0000: 3 admits failed in a row" in check.stdout
        reader = PostgresReader(env.claim_db)
        counts = await reader.failing_counts()
        assert counts == FailingCounts(schedules=1, stuck_schedules=1, requests=0)
        metrics = Metrics()
        metrics.set_failing(counts)
        stuck = b'qlsched_failing{kind="stuck_schedule",profile="cluster"} 1.0'
        assert stuck in metrics.render()
        assert [type(o) for o in await _cron_rounds(env, 1)] == [Admitted]
        assert await reader.failing_counts() == FailingCounts()
