"""Pools that keep their sessions: no reset round trip at every call (issue #27, item 3).

asyncpg resets a connection at each release (``SELECT pg_advisory_unlock_all(); CLOSE ALL;
UNLISTEN *; RESET ALL``): one more round trip and its server work for every call, about
as much as an idle round's claim. The replica's claim pool leaves no session state
behind, so it skips it (``open_database(reset_session=False)``); a transaction left open
is still rolled back, and readiness, the one caller that changes settings on that pool,
gives its connection back restored or not at all.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

import qlsched.postgres.readiness as readiness_module
from qlsched.cluster.root import open_cluster_control
from qlsched.postgres.claim import CLAIM_SETTINGS
from qlsched.postgres.pool import Connection, open_database
from qlsched.postgres.readiness import check_readiness
from tests.integration.cluster_support import (
    control_config,
    open_superuser,
    publish_triggers,
    trigger,
    wait_until,
)
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

RESET_QUERY = "pg_advisory_unlock_all"
"""A word of asyncpg's reset query, as the server shows a backend's last statement."""


async def _set_name(conn: Connection) -> None:
    await conn.execute("SET application_name = 'changed-by-a-call'")


async def _name(conn: Connection) -> str:
    return str(await conn.fetchval("SHOW application_name"))


@pytest.mark.parametrize(
    ("reset_session", "seen"), [(True, "pool-app"), (False, "changed-by-a-call")]
)
async def test_a_kept_session_is_lent_out_as_the_last_call_left_it(
    pg_db: TestDatabase, reset_session: bool, seen: str
) -> None:
    """Rule: a pool with ``reset_session=False`` sends no reset between calls (a setting one
    call changed is still there at the next); the default pool resets it."""
    async with open_database(
        pg_db.runtime_dsn, max_size=1, application_name="pool-app", reset_session=reset_session
    ) as db:
        await db.run(_set_name)
        assert await db.run(_name) == seen


async def test_a_kept_session_still_ends_a_transaction_left_open(pg_db: TestDatabase) -> None:
    """Rule: a call that leaves a transaction open does not hand it to the next call: the
    next statement runs in a transaction of its own (another start time)."""

    async def leave_open(conn: Connection) -> Any:
        await conn.execute("BEGIN")
        return await conn.fetchval("SELECT now()")

    async def started(conn: Connection) -> Any:
        return await conn.fetchval("SELECT now()")

    async with open_database(pg_db.runtime_dsn, max_size=1, reset_session=False) as db:
        left_open_at = await db.run(leave_open)
        assert await db.run(started) != left_open_at


async def _settings(conn: Connection) -> tuple[int, str, str]:
    row = await conn.fetchrow(
        "SELECT pg_backend_pid() AS pid, current_setting('enable_seqscan') AS seq,"
        " current_setting('plan_cache_mode') AS plans"
    )
    assert row is not None
    return int(row["pid"]), str(row["seq"]), str(row["plans"])


async def test_readiness_gives_a_kept_session_back_with_its_own_settings(
    pg_db: TestDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: readiness runs with the planner's defaults on the claim pool's connection and
    gives it back with the pool's settings; when readiness fails half-way the connection
    is closed, so the next call gets a new one with the pool's settings, never one left with
    sequential scans on."""

    async def ready(conn: Connection) -> bool:
        return (await check_readiness(conn, lease_ms=6_000)).ready

    async with open_database(
        pg_db.runtime_dsn, max_size=1, settings=dict(CLAIM_SETTINGS), reset_session=False
    ) as db:
        pid, seq, plans = await db.run(_settings)
        assert (seq, plans) == ("off", "force_generic_plan")
        assert await db.run(ready) is True
        assert await db.run(_settings) == (pid, "off", "force_generic_plan")

        async def fail_half_way(conn: Connection, *, lease_ms: int) -> Any:
            # A server error: the pool keeps a connection the server answered on.
            return await conn.fetchval(
                "SELECT 1 / (current_setting('enable_seqscan') = 'off')::int"
            )

        monkeypatch.setattr(readiness_module, "_check_readiness", fail_half_way)
        with pytest.raises(asyncpg.DivisionByZeroError):
            await db.run(ready)
        new_pid, seq, plans = await db.run(_settings)
        assert new_pid != pid
        assert (seq, plans) == ("off", "force_generic_plan")


async def test_a_replica_sends_no_reset_between_its_claims(pg_db: TestDatabase) -> None:
    """Rule: after a replica has claimed and admitted, the last statement of each of its
    claim backends is one of its own, never asyncpg's reset query (which is the last
    statement of every idle connection of a resetting pool, as its admit pool shows)."""
    await publish_triggers(pg_db, [trigger("t1")])
    config = control_config(pg_db.runtime_dsn, "keeper")
    async with (
        open_superuser(pg_db) as su,
        open_cluster_control(config, sink=MemorySink(replica="keeper")) as control,
    ):
        await su.wait_initialised(["t1"])
        await su.make_due(["t1"])

        async def admitted() -> bool:
            return await su.run_count() == 1

        await wait_until(admitted, what="one Run admitted")
        backends = await su.fetch(
            "SELECT application_name AS app, query FROM pg_stat_activity"
            " WHERE datname = $1 AND application_name IN ('qlsched-claim', 'qlsched-admit')"
            " AND (application_name = 'qlsched-claim' OR state = 'idle')",
            su.name,
        )
        control.request_stop()
    # Claim backends in any state (one may be claiming right now: its query is the claim);
    # admit backends only when idle (nothing is left to admit, so they are).
    claims = [b["query"] for b in backends if b["app"] == "qlsched-claim"]
    admits = [b["query"] for b in backends if b["app"] == "qlsched-admit"]
    assert claims, backends
    assert [q for q in claims if RESET_QUERY in q] == [], claims
    assert admits, backends
    assert all(RESET_QUERY in q for q in admits), admits


async def test_run_each_uses_distinct_connections_and_hands_them_back(
    pg_db: TestDatabase,
) -> None:
    """Rule: ``run_each(n, fn)`` runs ``fn`` on n distinct connections (held together, so
    none twice), opening them as needed, and returns every one to the pool, also when
    ``fn`` fails on the server."""
    pids: list[int] = []

    async def pid(conn: Connection) -> None:
        pids.append(int(await conn.fetchval("SELECT pg_backend_pid()")))

    async def fails(conn: Connection) -> None:
        await conn.fetchval("SELECT 1/0")

    async with open_database(pg_db.runtime_dsn, min_size=1, max_size=3) as db:
        await db.run_each(3, pid)
        assert len(pids) == len(set(pids)) == 3
        stats = db.statistics()
        assert (stats.size, stats.idle) == (3, 3)
        with pytest.raises(asyncpg.DivisionByZeroError):
            await db.run_each(2, fails)
        assert db.statistics().idle == 3
