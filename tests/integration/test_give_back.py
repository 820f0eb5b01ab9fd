"""An admit that cannot commit gives its rows back at once (issue #27, item 1).

Retries spent on serialization failures (or any failure but a lost fence and a lost
COMMIT reply) used to leave the round's claims to expire, so those rows waited a whole
lease: under contention that was the drain's cliff. Now the rows are released under their
own fence in the same round, with the failure counted on the row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from qlsched.core.outcomes import Outcome, RetryExhausted
from qlsched.postgres.store import PostgresStore
from tests.integration.adapter_support import Env, fire_for, one_project, open_env
from tests.support.pg import TestDatabase

LEASE_MS = 30_000


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as e:
        yield e


async def test_retries_exhausted_give_the_rows_back_at_once(env: Env) -> None:
    """Rule: an admit whose serialization failures outlast its retries (here a budget of
    none, and a real 40001: another transaction updated one row while the admit waited for
    it; the batch admits the other two and takes that one alone) ends
    ``RetryExhausted(40001)`` for it, and that row is claimable again at once, well inside
    the lease, with its cursor unchanged and the failure counted on it."""
    await env.publish(one_project(3))
    await env.make_due()
    claim_db, admit_db = await env.open_pools()
    store = PostgresStore(claim_db, admit_db, retries=0, sink=env.sink)
    claims = await store.claim("r1", 16, LEASE_MS)
    assert len(claims) == 3
    before = await env.schedules()
    other = await env.connect(env.db.superuser_dsn)
    tx = other.conn.transaction()
    await other.call(tx.start)
    await other.call(
        other.conn.execute,
        "UPDATE qlsched.trigger_schedules SET coalesced_total = coalesced_total"
        " WHERE trigger_id = 't0001'",
    )
    outcomes: list[Outcome] = []

    async def admit() -> None:
        outcomes.extend(await store.admit([fire_for(c) for c in claims]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(admit)
        await env.wait_lock_waiters(1)
        await other.call(tx.commit)

    assert [type(o).__name__ for o in outcomes] == ["Admitted", "RetryExhausted", "Admitted"]
    assert outcomes[1] == RetryExhausted("p", "t0001", attempts=1, sqlstate="40001")
    row = (await env.schedules())["t0001"]
    assert row["claim_token"] is None
    assert row["next_fire_at_ms"] == before["t0001"]["next_fire_at_ms"]
    assert (row["failures"], row["last_failure"]) == (1, "retry_exhausted:40001")
    [again] = await env.store.claim("r2", 16, LEASE_MS)
    assert again.trigger_id == "t0001"
    assert again.claimed_at_ms < claims[1].fence.expires_at_ms - LEASE_MS // 2
