"""The replica pools' server settings: no statement of theirs is ever JIT-compiled.

Both pools turn sequential scans off, which adds 1e10 to the cost of any plan that must still
read a table whole (the one-row ``retention`` setting, read by every prune batch). That cost
is far above ``jit_above_cost`` and ``jit_optimize_above_cost``: on a server built with
LLVM (Debian's and most distributions' packages, JIT on by default) each prune batch was
compiled with inlining and optimization at every call, about 0.4 s of CPU per replica per
pass, which sank a 16-replica burst to a third of its rate (docs/performance.md, JIT).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import asyncpg
import pytest

from qlsched.postgres.queries import query
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS
from tests.support.pg import TestDatabase, sql_run

PG_DISABLED_NODES = 180_000
"""From PostgreSQL 18 a disabled plan node is counted apart instead of adding 1e10 to its
cost: there the prune batch's cost stays small (and the wheel's server has no LLVM)."""
POOLS = [
    pytest.param(dict(CLAIM_SETTINGS), id="claim-pool"),
    pytest.param(dict(ADMIT_SETTINGS), id="admit-pool"),
]


@pytest.mark.parametrize("settings", POOLS)
def test_a_prune_batch_on_a_replica_pool_is_never_jit_compiled(
    pg_db: TestDatabase, settings: Mapping[str, str]
) -> None:
    """Rule: the replica's pools run with JIT off. The prune batch, planned with a pool's
    settings, costs more than the server's JIT threshold before PostgreSQL 18 (with JIT on, a
    server with LLVM would compile it at every call), yet its executed plan shows no JIT."""

    async def fn(conn: asyncpg.Connection[Any]) -> tuple[str, int, float, float, dict[str, Any]]:
        jit = str(await conn.fetchval("SHOW jit"))
        version = int(await conn.fetchval("SHOW server_version_num"))
        threshold = float(await conn.fetchval("SHOW jit_above_cost"))
        tx = conn.transaction()
        await tx.start()
        try:
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + query("retention_prune"), 10
            )
        finally:
            await tx.rollback()
        [top] = json.loads(raw)
        # The function's own statement: its cost is what JIT would be decided on.
        body = await conn.fetchval(
            "SELECT prosrc FROM pg_catalog.pg_proc WHERE proname = 'prune_finished_runs'"
        )
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(f"PREPARE prune_cost(integer) AS {body}")
            inner = await conn.fetchval("EXPLAIN (FORMAT JSON) EXECUTE prune_cost(10)")
        finally:
            await tx.rollback()
        cost = float(json.loads(inner)[0]["Plan"]["Total Cost"])
        return jit, version, threshold, cost, top

    jit, version, threshold, cost, top = sql_run(pg_db.superuser_dsn, fn, server_settings=settings)
    assert jit == "off"
    if version < PG_DISABLED_NODES:
        assert cost > threshold, (cost, threshold)
    assert "JIT" not in top, top["JIT"]


async def test_a_pool_keeps_the_batch_admit_prepared(pg_db: TestDatabase) -> None:
    """Rule: a pool's connection keeps a statement as long as the batch admit prepared (a
    named server-side statement, parsed and planned once), though it is longer than
    asyncpg's default cache limit: sent twice, it is one prepared statement, the same."""
    import inspect

    from qlsched.postgres.pool import STATEMENT_CACHE_BYTES, Connection, open_database

    default = inspect.signature(asyncpg.connect).parameters["max_cacheable_statement_size"]
    marker = "-- the pool's statement cache"
    sql = "SELECT 1 " + marker + "\n" + "-- " + "x" * (default.default + 100) + "\n"
    assert default.default < len(sql.encode()) < STATEMENT_CACHE_BYTES

    async def twice(conn: Connection) -> list[Any]:
        for _ in range(2):
            await conn.fetchval(sql)
        return list(
            await conn.fetch(
                "SELECT name FROM pg_catalog.pg_prepared_statements WHERE statement LIKE $1",
                "%" + marker + "%",
            )
        )

    async with open_database(pg_db.runtime_dsn, max_size=1) as db:
        prepared = await db.run(twice)
    assert len(prepared) == 1, prepared
