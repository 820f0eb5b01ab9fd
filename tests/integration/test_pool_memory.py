"""A pool's calls leave nothing behind on the trio-asyncio loop: a replica's memory does not
grow with the number of statements it has run (issue #27 item 6).

asyncpg arms a timer at each release to close a connection idle for
``max_inactive_connection_lifetime`` and cancels it at the next acquire. trio-asyncio's loop
keeps a cancelled timer in its heap until the time it would have fired, so with a lifetime
of 300 s every call's timer (and its context copy) stayed alive five minutes: in a burst, a
replica held about 53 more of them every second.
"""

from __future__ import annotations

import asyncio
import gc

from qlsched.postgres.pool import Connection, open_database
from tests.support.pg import TestDatabase

CALLS = 500


def _live_timers() -> int:
    gc.collect()
    return sum(isinstance(o, asyncio.TimerHandle) for o in gc.get_objects())


async def test_calls_leave_no_timer_alive_on_the_loop(pg_db: TestDatabase) -> None:
    """Rule: after CALLS calls through a pool, the loop holds no more live timers than
    after the first few (a timer per call would leave CALLS of them for minutes)."""

    async def one(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT 1"))

    async with open_database(pg_db.runtime_dsn, max_size=2) as db:
        for _ in range(5):
            await db.run(one)
        before = _live_timers()
        for _ in range(CALLS):
            assert await db.run(one) == 1
        after = _live_timers()
    grown = f"live timers: {before} after 5 calls, {after} after {CALLS} more"
    assert after - before < CALLS // 10, grown
