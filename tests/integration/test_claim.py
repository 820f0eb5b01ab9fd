"""The claim statement on PostgreSQL: order, SKIP LOCKED, lease expiry on the database clock,
concurrent claimers and the query plan (docs/contract.md §5 "Claim").

The store-agnostic rules (order of a handful of rows, limit, fence written) are in the
conformance suite; these pin what only the real statement can get wrong: its two arms
(unclaimed rows and expired claims) merged in one order, row locks, real time, and the index
it walks.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import trio

from qlsched.core.fence import Claim
from qlsched.core.outcomes import Admitted, FenceLost
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query
from qlsched.postgres.store import PostgresStore
from tests.integration.adapter_support import (
    LEASE_MS,
    MINUTE_MS,
    Env,
    fire_for,
    one_project,
    trigger,
)

SHORT_LEASE_MS = 1_500


def keys(claims: list[Claim]) -> list[tuple[str, str]]:
    return [(c.project_id, c.trigger_id) for c in claims]


# --- order and SKIP LOCKED -------------------------------------------------------------------


async def test_claim_order_merges_fresh_and_expired_rows(env: Env) -> None:
    """Rows whose claim expired come from a separate arm of the statement, yet the claimed
    set and its order are one ``ORDER BY next_fire_at_ms NULLS FIRST, project_id,
    trigger_id``: an expired row is taken in its place among unclaimed ones, ahead of later
    cursors, and LIMIT cuts the merged order, not either arm alone."""
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p"), ProjectEntry(id="q")],
            tasks=[TaskEntry(project=x, id="task", command="true") for x in ("p", "q")],
            triggers=[trigger("p", t) for t in "abcde"] + [trigger("q", "aa"), trigger("q", "new")],
        )
    )
    now = await env.now_ms()
    old, mid, late = now - 30_000, now - 20_000, now - 10_000
    for project, trigger_id, cursor in [
        ("p", "a", late),
        ("p", "b", mid),
        ("p", "c", old),
        ("p", "d", mid),
        ("p", "e", now + 10 * MINUTE_MS),  # not due
        ("q", "aa", mid),
    ]:
        await env.set_cursor(project, trigger_id, cursor)
    # A replica that later died claimed the first three; two of its leases are over, q/new
    # (cursor NULL, first in any order) is still validly held and is never taken.
    dead = await env.store.claim("dead", 3, LEASE_MS)
    assert keys(dead) == [("q", "new"), ("p", "c"), ("p", "b")]
    await env.expire_claim("p", "c")
    await env.expire_claim("p", "b")

    first = await env.store.claim("r1", 3, LEASE_MS)
    rest = await env.store.claim("r2", 10, LEASE_MS)

    assert keys(first) == [("p", "c"), ("p", "b"), ("p", "d")]
    assert keys(rest) == [("q", "aa"), ("p", "a")]
    assert first[1].fence.version == dead[2].fence.version + 1


async def test_locked_row_is_skipped_not_waited_for(env: Env) -> None:
    """A schedule row locked by another transaction (``SELECT ... FOR UPDATE`` held open) is
    skipped: the claim returns at once with the next row in claim order, and the locked row
    is claimable as soon as the lock goes."""
    await env.publish(one_project(ids=["a", "b", "c"]))
    await env.make_due()  # same cursor: order is by trigger id
    holder = await env.connect()
    await holder.execute("BEGIN")
    await holder.fetch(
        "SELECT 1 FROM qlsched.trigger_schedules"
        " WHERE project_id = 'p' AND trigger_id = 'a' FOR UPDATE"
    )

    with trio.fail_after(1.0):  # well under the runtime role's lock_timeout
        got = await env.store.claim("r1", 1, LEASE_MS)

    assert keys(got) == [("p", "b")]
    assert (await env.schedule("p", "a"))["claim_token"] is None
    await holder.execute("ROLLBACK")
    assert keys(await env.store.claim("r1", 1, LEASE_MS)) == [("p", "a")]


async def test_locked_expired_row_is_skipped(env: Env) -> None:
    """The expired-claim arm skips locked rows too: a takeover never waits on a row another
    transaction holds."""
    await env.publish(one_project(ids=["a", "b"]))
    await env.make_due()
    await env.store.claim("dead", 2, LEASE_MS)
    await env.expire_claim("p", "a")
    await env.expire_claim("p", "b")
    holder = await env.connect()
    await holder.execute("BEGIN")
    await holder.fetch(
        "SELECT 1 FROM qlsched.trigger_schedules"
        " WHERE project_id = 'p' AND trigger_id = 'a' FOR UPDATE"
    )

    with trio.fail_after(1.0):
        got = await env.store.claim("r1", 5, LEASE_MS)

    assert keys(got) == [("p", "b")]
    await holder.execute("COMMIT")
    assert keys(await env.store.claim("r1", 5, LEASE_MS)) == [("p", "a")]


async def test_claim_vs_uncommitted_claim(env: Env) -> None:
    """Claim vs claim, as an isolation schedule: session A runs the claim statement and has
    not committed; claimer B neither waits nor takes A's rows, and takes the rest in order;
    once A commits, A's rows are validly claimed and nobody takes them."""
    await env.publish(one_project(5))
    await env.make_due()
    a = await env.connect()
    await a.execute("BEGIN")
    a_rows = await a.fetch(query("claim"), "A", 2, LEASE_MS, 0)
    assert [r["trigger_id"] for r in a_rows] == ["t0000", "t0001"]

    with trio.fail_after(1.0):
        b = await env.store.claim("B", 10, LEASE_MS)

    assert [c.trigger_id for c in b] == ["t0002", "t0003", "t0004"]
    await a.execute("COMMIT")
    assert await env.store.claim("C", 10, LEASE_MS) == []
    owners = {t: row["claim_owner"] for t, row in (await env.schedules()).items()}
    assert owners == {"t0000": "A", "t0001": "A", "t0002": "B", "t0003": "B", "t0004": "B"}


async def assert_first_fences_stored(env: Env, claimed: list[tuple[str, Claim]]) -> None:
    """Each (claimer, claim) pair's fence is the one stored on its row: that claimer as owner,
    the claim's token, and claim version 1 (each row's first claim)."""
    rows = await env.schedules()
    for owner, c in claimed:
        row = rows[c.trigger_id]
        assert (row["claim_owner"], row["claim_token"]) == (owner, c.fence.token)
        assert row["claim_version"] == c.fence.version == 1


async def test_concurrent_claimers_take_disjoint_rows(env: Env) -> None:
    """Many claimers at once on separate connections: every due row is claimed by exactly one
    of them, and each claimer's fence is the one stored on the row."""
    await env.publish(one_project(60))
    await env.make_due()
    stores = [env.store, await env.open_store(), await env.open_store()]
    got: dict[str, list[Claim]] = {}

    async def claimer(owner: str, store_index: int) -> None:
        mine: list[Claim] = []
        for _ in range(4):
            mine.extend(await stores[store_index].claim(owner, 7, LEASE_MS))
        got[owner] = mine

    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(claimer, f"r{i}", i % 3)

    claimed = [c for claims in got.values() for c in claims]
    assert sorted(c.trigger_id for c in claimed) == [f"t{i:04d}" for i in range(60)]
    await assert_first_fences_stored(env, [(o, c) for o, claims in got.items() for c in claims])


async def test_rows_updated_during_claims_are_still_claimed(env: Env) -> None:
    """A race test: while two claimers take one row at a time, another session keeps
    updating and committing the first unclaimed rows (leaving them unclaimed and due), so a
    claim's lock step often meets a version newer than its snapshot and its UPDATE has to
    follow the row there. No claim comes back empty while plenty of rows are free, and every
    row is claimed exactly once, by a claim whose fence is the one stored on the row."""
    await env.publish(one_project(200))
    await env.make_due()
    stores = [env.store, await env.open_store()]
    claimed: list[tuple[str, Claim]] = []
    empty_while_free: list[int] = []
    touches = 0

    async def toucher() -> None:
        nonlocal touches
        while True:
            await env.su_exec(
                "UPDATE qlsched.trigger_schedules SET updated_at_ms = updated_at_ms"
                " WHERE (project_id, trigger_id) IN (SELECT project_id, trigger_id"
                " FROM qlsched.trigger_schedules WHERE claim_token IS NULL"
                " ORDER BY trigger_id LIMIT 2 FOR UPDATE SKIP LOCKED)"
            )
            touches += 1

    async def claimer(owner: str, store: PostgresStore) -> None:
        while len(claimed) < 200:
            free = 200 - len(claimed)
            got = await store.claim(owner, 1, LEASE_MS)
            if not got and free > 20:
                empty_while_free.append(free)
            claimed.extend((owner, c) for c in got)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(toucher)
            async with trio.open_nursery() as claimers:
                for i, store in enumerate(stores):
                    claimers.start_soon(claimer, f"r{i}", store)
            nursery.cancel_scope.cancel()

    assert touches > 0
    assert empty_while_free == []
    assert sorted(c.trigger_id for _, c in claimed) == [f"t{i:04d}" for i in range(200)]
    await assert_first_fences_stored(env, claimed)


# --- leases on the database clock ------------------------------------------------------------


async def test_takeover_only_after_database_time_passes_expiry(env: Env) -> None:
    """A valid claim is never taken over: every claim attempt made while the database time is
    before the lease's expiry gets nothing; the takeover happens only once the database clock
    passes it (its claim time >= the old expiry), under a new token and version, and the old
    holder's admit then fails its fence while the new holder's succeeds."""
    await env.publish(one_project(1))
    await env.make_due()
    [old] = await env.store.claim("r1", 10, SHORT_LEASE_MS)
    assert old.fence.expires_at_ms == old.claimed_at_ms + SHORT_LEASE_MS
    other = await env.open_store()
    refused_before_expiry = 0

    with trio.fail_after(10):
        while True:
            got = await other.claim("r2", 10, SHORT_LEASE_MS)
            seen_after = await env.now_ms()
            if got:
                break
            if seen_after < old.fence.expires_at_ms:
                refused_before_expiry += 1
            await trio.sleep(0.1)

    [new] = got
    assert refused_before_expiry >= 3
    assert new.claimed_at_ms >= old.fence.expires_at_ms
    assert new.fence.owner == "r2"
    assert new.fence.token != old.fence.token
    assert new.fence.version == old.fence.version + 1
    assert new.cursor_ms == old.cursor_ms
    [stale] = await env.store.admit([fire_for(old)])
    assert stale == FenceLost("p", "t0000", part="owner")
    [fresh] = await other.admit([fire_for(new)])
    assert isinstance(fresh, Admitted)
    assert (await env.counts()).runs == 1


async def test_same_owner_reclaim_is_a_new_fence(env: Env) -> None:
    """ABA: the same owner re-claiming a row after its own lease expired gets a new token
    and version; a FireRequest from the first claim (same owner) is refused on the token,
    so owner plus expiry alone could never let it through."""
    await env.publish(one_project(1))
    await env.make_due()
    [first] = await env.store.claim("r1", 1, LEASE_MS)
    stale_fire = fire_for(first)
    await env.expire_claim("p", "t0000")

    [second] = await env.store.claim("r1", 1, LEASE_MS)

    assert second.fence.owner == first.fence.owner
    assert second.fence.token != first.fence.token
    assert second.fence.version == first.fence.version + 1
    [outcome] = await env.store.admit([stale_fire])
    assert outcome == FenceLost("p", "t0000", part="token")
    assert (await env.counts()).runs == 0
    [ok] = await env.store.admit([fire_for(second)])
    assert isinstance(ok, Admitted)


async def test_tokens_are_distinct_in_a_batch_and_new_at_every_claim(env: Env) -> None:
    """The statement draws its randomness once and puts each row's place in the batch in the
    token: the tokens of one batch are all different random (version 4) UUIDs, and claiming
    the same rows again, after their leases expired, gives every row a token none of them had
    before, including the row that comes back at the same place."""
    await env.publish(one_project(20))
    await env.make_due()
    first = await env.store.claim("r1", 16, LEASE_MS)
    for c in first:
        await env.expire_claim(c.project_id, c.trigger_id)
    second = await env.store.claim("r1", 16, LEASE_MS)

    assert keys(second) == keys(first)
    tokens = [c.fence.token for c in first + second]
    assert len(set(tokens)) == 32
    assert {(t.version, t.variant) for t in tokens} == {(4, uuid.RFC_4122)}
    rows = await env.schedules()
    assert {rows[c.trigger_id]["claim_token"] for c in second} == {c.fence.token for c in second}


# --- the plan --------------------------------------------------------------------------------

BULK_ROWS = 4_000
BULK_PROJECTS = 7

BULK_SQL = [
    """INSERT INTO qlsched.projects (project_id, state, revision, created_at_ms, updated_at_ms)
       SELECT 'bulk' || g, 'active', 1, 0, 0 FROM generate_series(0, $1::int - 1) AS g""",
    """INSERT INTO qlsched.tasks (project_id, task_id, revision, content_digest, command,
                                  created_at_ms, updated_at_ms)
       SELECT project_id, 'task', 1, encode(sha256('{}'::bytea), 'hex'), 'true', 0, 0
         FROM qlsched.projects""",
    """INSERT INTO qlsched.execution_revisions (execution_revision_id, project_id, task_id,
                                                task_revision, executor_kind, payload, digest,
                                                created_at_ms)
       SELECT gen_random_uuid(), project_id, 'task', 1, 'remote_worker', '{}',
              encode(sha256('{}'::bytea), 'hex'), 0
         FROM qlsched.tasks""",
    """INSERT INTO qlsched.triggers (project_id, trigger_id, revision, cron, task_id,
                                     task_revision, execution_revision_id, content_digest,
                                     created_at_ms, updated_at_ms)
       SELECT e.project_id, 't' || lpad(g::text, 5, '0'), 1, '* * * * *', 'task', 1,
              e.execution_revision_id, repeat('b', 64), 0, 0
         FROM generate_series(1, $1::int) AS g
         JOIN qlsched.execution_revisions AS e ON e.project_id = 'bulk' || (g % $2::int)""",
    # Mostly future cursors; a few uninitialised; every 5th due, in 17 tie groups spread
    # over the projects; some validly claimed, a few with expired claims (due), a few
    # inactive.
    """INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision, active,
                                              next_fire_at_ms, claim_owner, claim_token,
                                              claim_version, claim_expires_at_ms,
                                              updated_at_ms)
       SELECT project_id, trigger_id, 1, n % 31 <> 0,
              CASE WHEN n % 500 = 0 THEN NULL
                   WHEN n % 5 = 0 OR n % 97 = 0 OR n % 89 = 0 THEN $1::bigint - 1000 * (n % 17)
                   ELSE $1::bigint + 3600000 + n END,
              CASE WHEN n % 97 = 0 OR n % 89 = 0 THEN 'other' END,
              CASE WHEN n % 97 = 0 OR n % 89 = 0 THEN gen_random_uuid() END,
              CASE WHEN n % 97 = 0 OR n % 89 = 0 THEN 1 ELSE 0 END,
              CASE WHEN n % 89 = 0 THEN $1::bigint - 5000
                   WHEN n % 97 = 0 THEN $1::bigint + 600000 END,
              $1::bigint - 60000
         FROM (SELECT project_id, trigger_id, substr(trigger_id, 2)::int AS n
                 FROM qlsched.triggers) AS t""",
]

EXPECTED_ORDER_SQL = """
SELECT project_id, trigger_id FROM qlsched.trigger_schedules
 WHERE active AND COALESCE(due_at_ms, -1) <= $1
   AND (claim_token IS NULL OR claim_expires_at_ms <= $1)
 ORDER BY due_at_ms NULLS FIRST, project_id, trigger_id
 LIMIT $2"""


def plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for child in node.get("Plans", []):
        out.extend(plan_nodes(child))
    return out


def cte(top: dict[str, Any], name: str) -> dict[str, Any]:
    [node] = [n for n in plan_nodes(top) if n.get("Subplan Name") == f"CTE {name}"]
    return node


SCHEDULE_NODES = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan", "ModifyTable"}


def check_claim_plan(plan_json: str) -> None:
    [explained] = json.loads(plan_json)
    top = explained["Plan"]
    on_schedules = [n for n in plan_nodes(top) if n.get("Relation Name") == "trigger_schedules"]
    assert on_schedules, plan_json
    assert {n["Node Type"] for n in on_schedules} <= SCHEDULE_NODES, plan_json
    # The unclaimed arms (due rows, uninitialised rows) are ordered walks of the claim
    # index: no Sort needed above either.
    for arm, index in (
        ("due", "trigger_schedules_claim_idx"),
        ("fresh", "trigger_schedules_fresh_idx"),
    ):
        nodes = plan_nodes(cte(top, arm))
        assert any(
            n["Node Type"] in ("Index Scan", "Index Only Scan") and n.get("Index Name") == index
            for n in nodes
        ), (arm, plan_json)
        assert all(n["Node Type"] != "Sort" for n in nodes), (arm, plan_json)
    # The expired arm uses its own small index.
    assert any(
        n.get("Index Name") == "trigger_schedules_expiry_idx"
        for n in plan_nodes(cte(top, "expired"))
    ), plan_json


async def bulk_schedules(env: Env) -> None:
    now = await env.now_ms()
    for i, sql in enumerate(BULK_SQL):
        args: tuple[Any, ...] = ((BULK_PROJECTS,), (), (), (BULK_ROWS, BULK_PROJECTS), ())[i]
        if i == len(BULK_SQL) - 1:
            args = (now,)
        await env.su_exec(sql, *args)
    await env.su_exec("ANALYZE")


async def test_claim_plan_walks_the_claim_index(env: Env) -> None:
    """On a few thousand analysed schedule rows, the claim statement's plan (custom, and
    generic as a long-lived prepared statement may end up using) never reads
    trigger_schedules by a sequential scan: the unclaimed arm is an ordered walk of
    ``trigger_schedules_claim_idx`` (no Sort above it), the expired arm uses
    ``trigger_schedules_expiry_idx``, the update finds rows by primary key."""
    await bulk_schedules(env)
    sql = query("claim")

    async def custom(conn: Connection) -> str:
        return str(await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, "r1", 16, LEASE_MS, 0))

    async def generic(conn: Connection) -> str:
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute("PREPARE claim_plan(text, int, bigint, bigint) AS " + sql)
            try:
                explain = "EXPLAIN (FORMAT JSON) EXECUTE claim_plan('r1', 16, 30000, 250)"
                return str(await conn.fetchval(explain))
            finally:
                await conn.execute("DEALLOCATE claim_plan")

    check_claim_plan(await env.runtime(custom))
    check_claim_plan(await env.runtime(generic))


async def test_a_full_claim_skips_the_next_due_probe(env: Env) -> None:
    """Rule: a claim that took its whole budget does not read the next due time (its
    replica claims again at once): the probe's index scan never runs and the hint is None.
    A claim with room left reads it. Why: the probe walks every dead entry before the first
    live one, thousands of pages a claim after a burst moved every cursor."""
    await env.publish(one_project(5))
    due = await env.make_due()
    await env.set_cursor("p", "t0004", due + 3_600_000)
    sql = query("claim")

    async def probe_loops(limit: int) -> tuple[int, int | None]:
        async def fn(conn: Connection) -> tuple[int, int | None]:
            transaction = conn.transaction()
            await transaction.start()
            try:
                explained = await conn.fetchval(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, "r1", limit, LEASE_MS, 0
                )
                rows = await conn.fetch(sql, "r2", limit, LEASE_MS, 0)
            finally:
                await transaction.rollback()
            [top] = json.loads(explained)
            [scan] = [
                n
                for n in plan_nodes(cte(top["Plan"], "upcoming"))
                if n.get("Index Name") == "trigger_schedules_claim_idx"
            ]
            return scan["Actual Loops"], rows[0]["next_due_ms"]

        return await env.runtime(fn)

    loops, hint = await probe_loops(2)  # 4 due rows: the claim is full
    assert hint is None
    assert loops == 0
    loops, hint = await probe_loops(10)  # room left: the probe runs and finds t0004
    assert hint == due + 3_600_000
    assert loops == 1


async def test_claim_draws_randomness_once_and_only_when_it_claims(env: Env) -> None:
    """The token's strong-random draw (the ``draw`` CTE) runs once for a claim of several
    rows and not at all for a claim that finds nothing due, the most common claim: counted
    in the executed generic plan, as the replicas' prepared claim runs it."""
    await env.publish(one_project(3))
    await env.make_due()
    sql = query("claim")

    async def draws(conn: Connection) -> tuple[int, int]:
        """(rows claimed, executions of the draw) for one claim, rolled back."""
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute("PREPARE claim_draws(text, int, bigint, bigint) AS " + sql)
            explained = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim_draws('r1', 16, 30000, 0)"
            )
            await conn.execute("DEALLOCATE claim_draws")  # a session's, not rolled back
        finally:
            await transaction.rollback()
        [top] = json.loads(explained)
        [draw] = [n for n in plan_nodes(top["Plan"]) if n.get("Subplan Name") == "CTE draw"]
        return top["Plan"]["Actual Rows"], draw["Actual Loops"]

    assert await env.runtime(draws) == (3, 1)
    await env.make_due(age_ms=-3_600_000)  # an hour ahead: nothing due
    # Nothing claimed: the one row of NULLs that carries the clock and the next due time.
    assert await env.runtime(draws) == (1, 0)


async def test_claimed_rows_come_back_in_index_order(env: Env) -> None:
    """On the same bulk table, one claim of k rows returns exactly the first k claimable rows
    (unclaimed or expired, active, due or uninitialised) in (cursor NULLS FIRST, project,
    trigger) order: uninitialised rows, then the oldest tie group across projects, with
    expired claims in their places."""
    await bulk_schedules(env)
    limit = 60
    expected = [
        (r["project_id"], r["trigger_id"])
        for r in await env.su(EXPECTED_ORDER_SQL, await env.now_ms(), limit)
    ]
    expired = {
        r["trigger_id"]
        for r in await env.su(
            "SELECT trigger_id FROM qlsched.trigger_schedules"
            " WHERE claim_token IS NOT NULL AND claim_expires_at_ms <= $1 AND active",
            await env.now_ms(),
        )
    }

    claims = await env.store.claim("r1", limit, LEASE_MS)

    assert keys(claims) == expected
    assert claims[0].cursor_ms is None
    assert expired & {c.trigger_id for c in claims}, "an expired claim sorts into the first k"


async def test_a_claim_says_how_long_until_the_next_row_falls_due(env: Env) -> None:
    """Rule: with every claim the store reads, by the database's clock, how long until the
    next unclaimed row falls due (what the lifecycle wakes for): the nearest future due
    time among rows nobody holds, also when the claim took nothing, and None when no row is
    waiting to fall due."""
    await env.publish(one_project(3))
    now = await env.now_ms()
    for i, ahead in enumerate((-1_000, 4_000, 9_000)):
        await env.set_cursor("p", f"t000{i}", now + ahead)
    [due] = await env.store.claim("r1", 16, LEASE_MS)
    assert due.trigger_id == "t0000"
    assert env.store.next_due_in_ms is not None
    assert 3_000 < env.store.next_due_in_ms <= 4_000
    assert await env.store.claim("r1", 16, LEASE_MS) == []
    assert 3_000 < env.store.next_due_in_ms <= 4_000
    await env.su_exec("UPDATE qlsched.trigger_schedules SET active = false")
    assert await env.store.claim("r1", 16, LEASE_MS) == []
    assert env.store.next_due_in_ms is None
