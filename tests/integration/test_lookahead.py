"""Claiming ahead on real PostgreSQL: the claim's lookahead window, the admit's due-time
check by the database clock, and replicas that claim ahead and never admit early.

Rules pinned:
- a claim with a lookahead takes rows due within it and no further; its next-due reading
  is when the next row enters the window;
- an admit sent before its row is due writes nothing (no Run, the cursor and claim
  unchanged) and is sent again when due, then admitted at or after the due time;
- an admit whose wait would outlive its lease gives its claim back at once;
- two coordinators with the default lookahead admit every occurrence once, none before it
  was due, and decide some ahead.
"""

from __future__ import annotations

import msgspec
import trio

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.fence import Claim
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.keys import fire_request
from qlsched.core.outcomes import Admitted, Fire, RetryExhausted
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.engine.stats import RoundStats
from qlsched.postgres.pool import Connection
from qlsched.postgres.store import PostgresStore
from tests.integration.adapter_support import LEASE_MS, Env, decision_for, trigger
from tests.support.memory_sink import MemorySink

HOURLY = "0 * * * *"


def hourly(*ids: str) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="task", command="true")],
        triggers=[trigger("p", i, cron=HOURLY) for i in ids],
    )


async def ahead_store(env: Env, lookahead_ms: int, sink: MemorySink | None = None) -> PostgresStore:
    claim_db, admit_db = await env.open_pools()
    return PostgresStore(claim_db, admit_db, sink=sink, lookahead_ms=lookahead_ms)


def fire_at_due(claim: Claim) -> Fire:
    """The claim's decision as of its due time (the engine's for a claim taken ahead)."""
    assert claim.cursor_ms is not None
    decision = decision_for(msgspec.structs.replace(claim, claimed_at_ms=claim.cursor_ms))
    assert isinstance(decision, Fire), decision
    return decision


async def test_a_claim_takes_rows_due_within_its_lookahead_and_no_further(env: Env) -> None:
    await env.publish(hourly("due", "soon", "later"))
    now = await env.now_ms()
    await env.set_cursor("p", "due", now - 1_000)
    await env.set_cursor("p", "soon", now + 2_000)
    await env.set_cursor("p", "later", now + 20_000)
    store = await ahead_store(env, 5_000)

    claims = await store.claim("r1", 10, LEASE_MS)

    assert [c.trigger_id for c in claims] == ["due", "soon"]
    assert store.next_due_in_ms is not None
    # "later" enters the 5 s window 15 s after now (less the time the statements took).
    assert 14_000 <= store.next_due_in_ms <= 15_000
    # Without a lookahead the same row is not claimable yet.
    assert await env.store.claim("r2", 10, LEASE_MS) == []


async def test_an_admit_before_the_due_time_writes_nothing_until_due(env: Env) -> None:
    await env.publish(hourly("t"))
    due = await env.now_ms() + 1_500
    await env.set_cursor("p", "t", due)
    store = await ahead_store(env, 5_000)
    [claim] = await store.claim("r1", 1, LEASE_MS)
    fire = fire_request(claim, fire_at_due(claim))
    before = await env.schedule("p", "t")

    outcomes: list[object] = []

    async def admit() -> None:
        outcomes.extend(await store.admit([fire]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(admit)
        with trio.fail_after(10):
            while True:  # the statement came back early, and the store waits to send it again
                if store.early_sends:
                    break
                await trio.sleep(0.01)
        # The statement ran and came back: nothing written, and it is still before due.
        assert await env.now_ms() < due
        assert msgspec.structs.astuple(await env.counts()) == (0, 0, 0)
        assert await env.schedule("p", "t") == before

    [outcome] = outcomes
    assert isinstance(outcome, Admitted), outcome
    assert outcome.admitted_at_ms >= due
    assert store.early_sends == 1
    resends = Metrics(admit_counts=store).registry.get_sample_value(
        "qlsched_admit_early_resends_total", {"profile": "cluster"}
    )
    assert resends == 1
    [run] = await env.su("SELECT scheduled_for_ms, created_at_ms FROM qlsched.runs")
    assert run["scheduled_for_ms"] == due
    assert run["created_at_ms"] >= due


async def test_an_admit_that_cannot_wait_in_its_lease_gives_the_claim_back(env: Env) -> None:
    await env.publish(hourly("t"))
    due = await env.now_ms() + 5_000
    await env.set_cursor("p", "t", due)
    sink = MemorySink()
    store = await ahead_store(env, 10_000, sink)
    [claim] = await store.claim("r1", 1, 3_000)  # a lease shorter than the wait
    fire = fire_request(claim, fire_at_due(claim))

    [outcome] = await store.admit([fire])

    assert isinstance(outcome, RetryExhausted), outcome
    assert outcome.attempts == 1  # sent once: the wait did not fit the lease
    assert await env.now_ms() < due  # given back at once, not after the lease
    assert msgspec.structs.astuple(await env.counts()) == (0, 0, 0)
    row = await env.schedule("p", "t")
    assert (row["claim_token"], row["next_fire_at_ms"], row["failures"]) == (None, due, 1)
    assert "admit_not_due" in [d.code for d in sink.items]


async def test_replicas_claiming_ahead_admit_once_and_never_early(env: Env) -> None:
    every_second = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="task", command="true")],
        triggers=[trigger("p", f"s{i}", cron="* * * * * *") for i in range(20)],
    )
    await env.publish(every_second)
    start = (await env.now_ms()) // 1000 * 1000 + 2_000
    await env.make_due(age_ms=0)
    await env.su_exec("UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $1", start)
    seen: list[RoundStats] = []
    replicas = []
    metrics = [Metrics(), Metrics()]
    for owner, m in zip(("r1", "r2"), metrics, strict=True):
        store = await ahead_store(env, 250)
        replicas.append(Coordinator(store, Config(owner=owner), env.sink, m))

    async def run(c: Coordinator) -> None:
        while True:
            seen.append(await c.run_round())
            await trio.sleep(0.02)

    async with trio.open_nursery() as nursery:
        for c in replicas:
            nursery.start_soon(run, c)
        await env.wait_db_time(start + 3_500, timeout_s=15)
        nursery.cancel_scope.cancel()

    runs = await env.su(
        "SELECT trigger_id, scheduled_for_ms, created_at_ms FROM qlsched.runs"
        " WHERE scheduled_for_ms BETWEEN $1 AND $2",
        start,
        start + 2_000,
    )
    keys = [(r["trigger_id"], r["scheduled_for_ms"]) for r in runs]
    assert len(keys) == len(set(keys)) == 60
    assert all(r["created_at_ms"] >= r["scheduled_for_ms"] for r in runs)
    ahead = sum(s.decided_ahead for s in seen)
    assert ahead > 0
    exposed = [
        m.registry.get_sample_value("qlsched_fires_decided_ahead_total", {"profile": "cluster"})
        for m in metrics
    ]
    assert sum(v or 0 for v in exposed) == ahead


async def test_warming_prepares_the_admit_on_every_admit_connection(env: Env) -> None:
    """Rule: ``warm`` sends the admit with no rows on each admit connection: each then holds
    the admit prepared (a first due row no longer pays its parse and plan), and nothing is
    written."""
    claim_db, admit_db = await env.open_pools()
    store = PostgresStore(claim_db, admit_db)
    prepared: list[bool] = []

    async def has_admit(conn: Connection) -> None:
        statements = await conn.fetch("SELECT statement FROM pg_catalog.pg_prepared_statements")
        prepared.append(any("advanced AS (" in r["statement"] for r in statements))

    await admit_db.run_each(2, has_admit)
    assert prepared == [False, False]
    await store.warm("r1", 2)
    prepared.clear()
    await admit_db.run_each(2, has_admit)
    assert prepared == [True, True]
    assert msgspec.structs.astuple(await env.counts()) == (0, 0, 0)


async def test_a_jittered_occurrence_claimed_ahead_is_admitted_at_its_due_time(
    env: Env,
) -> None:
    """Rule: with jitter, an occurrence S is due at S + h (``core.jitter``): a replica with
    a lookahead claims it ahead of S + h, not of S, holds it, and its Run is queued at or
    after S + h by the database clock (never between S and S + h)."""
    jitter_ms = 59_000
    now = await env.now_ms()
    if now % 60_000 > 50_000:  # leave room in this minute for S + h ahead of now
        await env.wait_db_time(now - now % 60_000 + 61_000, timeout_s=15)
        now = await env.now_ms()
    s = now - now % 60_000
    # A trigger whose h puts S + h 2-3.5 s ahead of now (its offset depends on its id).
    picked = next(
        (name, h)
        for name in (f"j{i}" for i in range(5_000))
        if 2_000 <= s + (h := jitter_offset_ms("p", name, 1, s, jitter_ms)) - now <= 3_500
    )
    name, h = picked
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[TaskEntry(project="p", id="task", command="true")],
            triggers=[trigger("p", name, cron="* * * * *", jitter_ms=jitter_ms)],
        )
    )
    assert (await env.schedule("p", name))["trigger_revision"] == 1
    await env.set_cursor("p", name, s)
    store = await ahead_store(env, 5_000)
    coordinator = Coordinator(store, Config(owner="r1", lookahead_ms=5_000), env.sink, Metrics())
    seen: list[RoundStats] = []
    with trio.fail_after(15):
        while not await env.runs_by_trigger():
            seen.append(await coordinator.run_round())
            await trio.sleep(0.05)

    [run] = await env.su(
        "SELECT scheduled_for_ms, queued_at_ms FROM qlsched.runs WHERE trigger_id = $1", name
    )
    assert run["scheduled_for_ms"] == s
    assert run["queued_at_ms"] >= s + h
    assert seen[0].decided_ahead == 1
    assert sum(st.admitted for st in seen) == 1
