"""Shared setup for the PostgreSQL adapter's repository tests (test_claim, test_admit,
test_publish, test_recovery).

``open_env`` gives a test one migrated database (the ``pg_db`` fixture) and, on one
trio-asyncio loop:

* the store under test as the runtime role, over its two pools (claims READ COMMITTED,
  admits SERIALIZABLE), with a ``MemorySink`` for its diagnostics;
* an admin pool for the real publisher;
* a superuser pool for what no role may do (move a cursor, corrupt a row, read ``xmin``);
* raw single connections (``Env.connect``) that keep a transaction open across awaits, to
  hold a row lock or a publish open while the store works (isolation-tester style).

Times come from the database (``Env.now_ms``), never from this process's clock. Waits poll
the database (``wait_db_time``, ``wait_lock_waiters``) and never sleep longer than a poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import asyncpg
import msgspec
import trio
import trio_asyncio

from qlsched.core.cron import parse_cron
from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.fence import Claim, FireRequest
from qlsched.core.keys import fire_request
from qlsched.core.outcomes import Decision, Fire, Initialize, NotDue, Outcome, Skip
from qlsched.core.publish_result import PublishResult
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.pool import Connection, Database, open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS, PostgresStore
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

T = TypeVar("T")

LEASE_MS = 30_000
MINUTE_MS = 60_000
EVERY_MINUTE = "* * * * *"
POLL_S = 0.05

NOW_SQL = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
SCHEDULE_SQL = (
    "SELECT xmin::text AS xmin, * FROM qlsched.trigger_schedules"
    " WHERE project_id = $1 AND trigger_id = $2"
)


# --- publish files ---------------------------------------------------------------------------


def trigger(
    project: str,
    trigger_id: str,
    *,
    task: str = "task",
    cron: str = EVERY_MINUTE,
    misfire: str = "skip",
    misfire_grace_ms: int = 60_000,
    enabled: bool = True,
    timezone: str = "UTC",
    dst_gap: str = "shift",
    dst_fold: str = "first",
    jitter_ms: int = 0,
    overlap: str = "allow",
) -> TriggerEntry:
    return TriggerEntry(
        project=project,
        id=trigger_id,
        task=task,
        cron=cron,
        timezone=timezone,
        misfire=misfire,  # type: ignore[arg-type]
        misfire_grace_ms=misfire_grace_ms,
        enabled=enabled,
        dst_gap=dst_gap,  # type: ignore[arg-type]
        dst_fold=dst_fold,  # type: ignore[arg-type]
        jitter_ms=jitter_ms,
        overlap=overlap,  # type: ignore[arg-type]
    )


def trigger_ids(n: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


def one_project(
    n: int = 0,
    *,
    project: str = "p",
    command: str = "true",
    cron: str = EVERY_MINUTE,
    ids: Sequence[str] | None = None,
    archived: bool = False,
    overlap: str = "allow",
) -> PublishFile:
    """One project, one task ``task`` running ``command``, triggers ``ids`` (or ``n`` of
    them named ``t0000``...) on ``cron`` under ``overlap``."""
    names = list(ids) if ids is not None else trigger_ids(n)
    return PublishFile(
        projects=[ProjectEntry(id=project, archived=archived)],
        tasks=[TaskEntry(project=project, id="task", command=command)],
        triggers=[trigger(project, name, cron=cron, overlap=overlap) for name in names],
    )


# --- decisions -------------------------------------------------------------------------------


def decision_for(claim: Claim, now_ms: int | None = None) -> Decision:
    """What the coordinator would decide for this claim: at its own database time as now,
    or at ``now_ms`` (a chosen instant: the decision a claim taken then would get)."""
    spec = TriggerSpec(
        cron=parse_cron(claim.cron, claim.timezone, dst_gap=claim.dst_gap, dst_fold=claim.dst_fold),
        misfire_policy=claim.misfire_policy,  # type: ignore[arg-type]
        misfire_grace_ms=claim.misfire_grace_ms,
    )
    now = claim.claimed_at_ms if now_ms is None else now_ms
    return decide(spec, claim.cursor_ms, now, claim.jitter)


def fire_for(claim: Claim, now_ms: int | None = None) -> FireRequest:
    """The Fire decision of a due claim (at ``now_ms`` as ``decision_for`` takes it), with
    freshly minted Run/Attempt ids."""
    decision = decision_for(claim, now_ms)
    assert isinstance(decision, Fire), decision
    return fire_request(claim, decision)


async def admit_due_at_cursors(env: Env, n: int, *, age_ms: int) -> list[Outcome]:
    """Make every row due ``age_ms`` ago, claim all ``n`` and admit them in one batch,
    each decided as at its cursor (on time: minutes-old cursors would be misfires now)."""
    await env.make_due(age_ms=age_ms)
    claims = await env.store.claim("r1", n, 30_000)
    assert len(claims) == n
    return await env.store.admit([fire_for(c, now_ms=c.cursor_ms) for c in claims])


def with_fence(claim: Claim, **changes: Any) -> Claim:
    """The claim with some of its fence parts replaced (a stale copy of it)."""
    return msgspec.structs.replace(claim, fence=msgspec.structs.replace(claim.fence, **changes))


def restale(fire: FireRequest, **fence_changes: Any) -> FireRequest:
    """The same FireRequest sent under a fence with some parts replaced."""
    return msgspec.structs.replace(fire, claim=with_fence(fire.claim, **fence_changes))


class RoundResult(msgspec.Struct):
    claimed: int = 0
    outcomes: list[Outcome] = msgspec.field(default_factory=list)


async def run_round(store: PostgresStore, owner: str, budget: int, lease_ms: int) -> RoundResult:
    """One coordinator-shaped round: one claim, a decision per claim, the round's Fires
    admitted as one batch. Initialize/skip/release settle under the same fence."""
    claims = await store.claim(owner, budget, lease_ms)
    result = RoundResult(claimed=len(claims))
    fires: list[FireRequest] = []
    for claim in claims:
        decision = decision_for(claim)
        match decision:
            case Fire():
                fires.append(fire_request(claim, decision))
            case Initialize():
                result.outcomes.append(await store.initialize(claim, decision))
            case Skip():
                result.outcomes.append(await store.skip(claim, decision))
            case NotDue():
                result.outcomes.append(await store.release(claim))
    result.outcomes.extend(await store.admit(fires))
    return result


# --- raw connections -------------------------------------------------------------------------


class RawConn:
    """One asyncpg connection on the test's trio-asyncio loop, used statement by statement,
    so a transaction (and its locks) can stay open while other tasks run."""

    def __init__(self, conn: asyncpg.Connection[Any], loop: Any) -> None:
        self.conn = conn
        self._loop = loop

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        result: T = await trio_asyncio.aio_as_trio(fn, loop=self._loop)(*args)
        return result

    async def execute(self, sql: str, *args: Any) -> str:
        return await self.call(self.conn.execute, sql, *args)

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return list(await self.call(self.conn.fetch, sql, *args))

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.call(self.conn.fetchval, sql, *args)


# --- the environment -------------------------------------------------------------------------


class Counts(msgspec.Struct, frozen=True):
    runs: int
    attempts: int
    events: int


class Env:
    """One test's database, store, publisher and superuser access (see module docstring)."""

    def __init__(
        self,
        db: TestDatabase,
        loop: Any,
        stack: AsyncExitStack,
        su_db: Database,
        admin_db: Database,
    ) -> None:
        self.db = db
        self.loop = loop
        self._stack = stack
        self._su_db = su_db
        self._admin_db = admin_db
        self.sink = MemorySink()
        self.store: PostgresStore = None  # type: ignore[assignment]  # set by open_env
        self.claim_db: Database = None  # type: ignore[assignment]

    # stores and connections, closed when the env closes

    async def open_pools(self) -> tuple[Database, Database]:
        """A runtime claim pool (READ COMMITTED) and admit pool (SERIALIZABLE), with the
        server settings a replica's pools run with."""
        claim_db = await self._stack.enter_async_context(
            open_database(self.db.runtime_dsn, max_size=4, settings=CLAIM_SETTINGS)
        )
        admit_db = await self._stack.enter_async_context(
            open_database(
                self.db.runtime_dsn, isolation="serializable", max_size=4, settings=ADMIT_SETTINGS
            )
        )
        return claim_db, admit_db

    async def open_store(self, *, sink: MemorySink | None = None) -> PostgresStore:
        """A store with its own two pools (another replica, as far as the database sees)."""
        claim_db, admit_db = await self.open_pools()
        return PostgresStore(claim_db, admit_db, sink=sink)

    async def connect(self, dsn: str | None = None) -> RawConn:
        """A raw connection (superuser by default), closed when the env closes."""
        conn = await trio_asyncio.aio_as_trio(asyncpg.connect, loop=self.loop)(
            dsn or self.db.superuser_dsn
        )
        raw = RawConn(conn, self.loop)

        async def close() -> None:
            with trio.move_on_after(5, shield=True):
                await raw.call(conn.close)

        self._stack.push_async_callback(close)
        return raw

    # superuser statements (one implicit transaction each)

    async def su(self, sql: str, *args: Any) -> list[Any]:
        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(sql, *args))

        return await self._su_db.run(fn)

    async def su_val(self, sql: str, *args: Any) -> Any:
        async def fn(conn: Connection) -> Any:
            return await conn.fetchval(sql, *args)

        return await self._su_db.run(fn)

    async def su_call(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on a superuser connection (one call, its own transaction)."""
        return await self._su_db.run(fn)

    async def su_exec(self, sql: str, *args: Any) -> str:
        async def fn(conn: Connection) -> str:
            return await conn.execute(sql, *args)

        return await self._su_db.run(fn)

    async def runtime(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on a runtime-role (READ COMMITTED) pooled connection."""
        return await self.claim_db.run(fn)

    # publish

    async def publish(self, spec: PublishFile, *, prune: bool = False) -> PublishResult:
        """The real publisher, as the admin role, one transaction."""

        async def fn(conn: Connection) -> PublishResult:
            return await publish(conn, spec, prune=prune)

        return await self._admin_db.run(fn)

    async def admin(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on the admin role's pooled connection (one call, its own transaction)."""
        return await self._admin_db.run(fn)

    # reads and moves

    async def now_ms(self) -> int:
        return int(await self.su_val(NOW_SQL))

    async def schedule(self, project: str, trigger_id: str) -> dict[str, Any]:
        """The whole schedule row, with its ``xmin`` (unchanged xmin = never rewritten)."""
        [row] = await self.su(SCHEDULE_SQL, project, trigger_id)
        return dict(row)

    async def schedules(self, project: str = "p") -> dict[str, dict[str, Any]]:
        rows = await self.su(
            "SELECT xmin::text AS xmin, * FROM qlsched.trigger_schedules WHERE project_id = $1",
            project,
        )
        return {r["trigger_id"]: dict(r) for r in rows}

    async def counts(self) -> Counts:
        [row] = await self.su(
            "SELECT (SELECT count(*) FROM qlsched.runs)::int AS runs,"
            " (SELECT count(*) FROM qlsched.attempts)::int AS attempts,"
            " (SELECT count(*) FROM qlsched.run_events)::int AS events"
        )
        return Counts(**dict(row))

    async def runs_by_trigger(self) -> dict[str, int]:
        rows = await self.su(
            "SELECT trigger_id, count(*)::int AS n FROM qlsched.runs GROUP BY trigger_id"
        )
        return {r["trigger_id"]: r["n"] for r in rows}

    async def make_due(
        self, project: str = "p", ids: Sequence[str] | None = None, *, age_ms: int = 1_000
    ) -> int:
        """Set the cursor of ``ids`` (default: every trigger of ``project``) to ``age_ms``
        before the database's now, all to the same value; returns it."""
        cursor = await self.now_ms() - age_ms
        if ids is None:
            await self.su_exec(
                "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $2 WHERE project_id = $1",
                project,
                cursor,
            )
        else:
            await self.su_exec(
                "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $2"
                " WHERE project_id = $1 AND trigger_id = ANY($3::text[])",
                project,
                cursor,
                list(ids),
            )
        return cursor

    async def set_cursor(self, project: str, trigger_id: str, cursor: int | None) -> None:
        await self.su_exec(
            "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $3"
            " WHERE project_id = $1 AND trigger_id = $2",
            project,
            trigger_id,
            cursor,
        )

    async def expire_claim(self, project: str, trigger_id: str) -> None:
        """Move a claim's expiry just into the database's past (nothing else changes)."""
        await self.su_exec(
            "UPDATE qlsched.trigger_schedules SET claim_expires_at_ms ="
            " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1"
            " WHERE project_id = $1 AND trigger_id = $2 AND claim_token IS NOT NULL",
            project,
            trigger_id,
        )

    # waits on the database, by polling

    async def wait_db_time(self, target_ms: int, *, timeout_s: float = 10.0) -> int:
        """Poll until the database's clock reaches ``target_ms``; returns the time seen."""
        with trio.fail_after(timeout_s):
            while True:
                now = await self.now_ms()
                if now >= target_ms:
                    return now
                await trio.sleep(min(POLL_S, (target_ms - now) / 1000))

    async def wait_lock_waiters(self, n: int, *, timeout_s: float = 5.0) -> None:
        """Poll until ``n`` runtime-role backends of this database wait on a lock."""
        with trio.fail_after(timeout_s):
            while True:
                waiting = await self.su_val(
                    "SELECT count(*) FROM pg_catalog.pg_stat_activity"
                    " WHERE datname = current_database() AND usename = 'qlsched_runtime'"
                    " AND wait_event_type = 'Lock'"
                )
                if waiting >= n:
                    return
                await trio.sleep(0.01)


@asynccontextmanager
async def open_env(db: TestDatabase) -> AsyncIterator[Env]:
    """The test's environment on ``db``; every pool and connection is closed on exit."""
    async with trio_asyncio.open_loop() as loop, AsyncExitStack() as stack:
        su_db = await stack.enter_async_context(open_database(db.superuser_dsn, max_size=2))
        admin_db = await stack.enter_async_context(open_database(db.admin_dsn, max_size=1))
        env = Env(db, loop, stack, su_db, admin_db)
        env.claim_db, admit = await env.open_pools()
        env.store = PostgresStore(env.claim_db, admit, sink=env.sink)
        yield env
