"""The claim over a table with paused rows (issue #18: paused rows are kept out of the claim
index, like inactive ones): the bench's ``ten_pct_paused`` state, loaded as the bench loads
it, is claimed by the same ordered index scan as ``ten_pct_inactive``, walks no paused row,
and claims only the active due rows."""

from __future__ import annotations

from typing import Any

from qlsched.postgres.pool import Connection, connect_once, open_database
from qlsched.postgres.queries import query
from qlsched.postgres.store import CLAIM_SETTINGS
from qlsched.tools import bench_data
from qlsched.tools.bench.scale import STATES
from tests.support.pg import TestDatabase

ROWS = 2_000
K = 256


async def _load(db: TestDatabase, state: bench_data.RowState) -> None:
    async def fn(conn: Connection) -> None:
        now = await bench_data.now_ms(conn)
        await bench_data.load_schedules(
            conn,
            ROWS,
            bench_data.RowState(
                due_pct=state.due_pct,
                inactive_pct=state.inactive_pct,
                paused_pct=state.paused_pct,
                due_at_ms=now - 1_000,
                later_ms=now + 86_400_000,
            ),
            now_ms=now,
        )
        await bench_data.vacuum(conn)

    await connect_once(db.superuser_dsn, fn)


async def _claim(db: TestDatabase) -> tuple[bench_data.ClaimPlan, list[Any]]:
    """The claim's executed plan, and the rows the claim itself takes (both rolled back),
    on a connection with a replica's claim settings."""

    async def fn(conn: Connection) -> tuple[bench_data.ClaimPlan, list[Any]]:
        plan = await bench_data.explain_claim(conn, owner="probe", limit=K, lease_ms=30_000)
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.fetch(query("claim"), "probe", K, 30_000, 0)
            claimed = await conn.fetch(
                "SELECT trigger_id, paused_at_ms FROM qlsched.trigger_schedules"
                " WHERE claim_owner = 'probe'"
            )
        finally:
            await tx.rollback()
        return plan, list(claimed)

    async with open_database(db.runtime_dsn, max_size=1, settings=CLAIM_SETTINGS) as runtime:
        return await runtime.run(fn)


async def test_paused_rows_cost_the_claim_what_inactive_rows_cost(pg_db: TestDatabase) -> None:
    """Rule: with 10 % of the rows paused and due, the claim's plan is the ordered scan of
    the claim index, node for node the plan of the same table with 10 % inactive rows, and
    the claim takes exactly the active due 1 %, never a paused row."""

    async def load_triggers(conn: Connection) -> None:
        now = await bench_data.now_ms(conn)
        await bench_data.load_triggers(
            conn, ROWS, crons=["* * * * * *"], misfire="skip", grace_ms=60_000, now_ms=now
        )

    await connect_once(pg_db.superuser_dsn, load_triggers)
    plans = {}
    for name in ("ten_pct_inactive", "ten_pct_paused"):
        await _load(pg_db, STATES[name])
        plans[name], claimed = await _claim(pg_db)
        assert len(claimed) == ROWS // 100
        assert all(r["paused_at_ms"] is None for r in claimed)
    assert plans["ten_pct_paused"].nodes == plans["ten_pct_inactive"].nodes
    assert any("trigger_schedules_claim_idx" in n for n in plans["ten_pct_paused"].nodes)
    assert not any("Seq Scan (trigger_schedules)" in n for n in plans["ten_pct_paused"].nodes)
