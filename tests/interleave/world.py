"""The explorer's world: one test database, the product's own actors on it, and the gate.

Actors run the product's code, never re-written SQL: a replica is a ``PostgresStore`` over
two one-connection pools (so its backends are known), a publisher is ``publish`` on a raw
admin connection inside a transaction the explorer commits as a separate step.

The claim gate. The claim is one statement: it takes its snapshot, then walks the claim
index and locks rows. To stop it between the two (where a publish that commits changes
what the lock finds), the test database gets a row-level-security policy on
``trigger_schedules`` whose check calls ``explorer.gate()``: for a session that set
``explorer.gate = on`` it waits on an advisory lock the explorer holds, once per row it
reads, before that row is locked. The product's SQL is unchanged; the policy exists only
in the test's database (readiness would refuse it, and no replica here checks readiness).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import trio
import trio_asyncio

from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.fence import Claim, FireRequest
from qlsched.core.keys import fire_request
from qlsched.core.outcomes import Decision, Fire, Initialize, NotDue, Outcome, Skip
from qlsched.core.publish_result import PublishResult
from qlsched.core.specs import PublishFile
from qlsched.postgres.pool import Database, open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS, PostgresStore
from tests.interleave.oracle import History, record_revisions, schedule_of

T = TypeVar("T")

GATE_KEY = 7_262_736_300_000_001
LEASE_MS = 30_000
BUDGET = 16

GATE_SQL = f"""
CREATE SCHEMA explorer;
CREATE FUNCTION explorer.gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF pg_catalog.current_setting('explorer.gate', true) = 'on' THEN
        PERFORM pg_catalog.pg_advisory_lock_shared({GATE_KEY});
        PERFORM pg_catalog.pg_advisory_unlock_shared({GATE_KEY});
    END IF;
    RETURN true;
END $$;
GRANT USAGE ON SCHEMA explorer TO qlsched_runtime, qlsched_admin, qlsched_observer;
GRANT EXECUTE ON FUNCTION explorer.gate() TO qlsched_runtime, qlsched_admin, qlsched_observer;
CREATE POLICY explorer_gate ON qlsched.trigger_schedules
    USING (explorer.gate()) WITH CHECK (true);
ALTER TABLE qlsched.trigger_schedules ENABLE ROW LEVEL SECURITY;
"""


class Raw:
    """One asyncpg connection on the world's loop, called from Trio."""

    def __init__(self, conn: asyncpg.Connection[Any], loop: Any) -> None:
        self.conn = conn
        self.loop = loop

    @property
    def pid(self) -> int:
        return self.conn.get_server_pid()

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kw: Any) -> T:
        async def go() -> T:
            return await fn(*args, **kw)

        result: T = await trio_asyncio.aio_as_trio(go, loop=self.loop)()
        return result

    async def execute(self, sql: str, *args: Any) -> str:
        return await self.call(self.conn.execute, sql, *args)

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return list(await self.call(self.conn.fetch, sql, *args))

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.call(self.conn.fetchval, sql, *args)


def decision_of(claim: Claim, lookahead_ms: int = 0) -> Decision:
    """The coordinator's decision for a claim: pure, on the claim's own database time, or
    as of its due time for a row claimed ahead (due within ``lookahead_ms``)."""
    spec = TriggerSpec(
        cron=schedule_of(claim.cron, claim.timezone),
        misfire_policy=claim.misfire_policy,  # type: ignore[arg-type]
        misfire_grace_ms=claim.misfire_grace_ms,
    )
    now = claim.claimed_at_ms
    if claim.cursor_ms is not None and now < claim.cursor_ms <= now + lookahead_ms:
        now = claim.cursor_ms
    return decide(spec, claim.cursor_ms, now)


@dataclasses.dataclass
class Replica:
    """A replica's store over one claim and one admit connection; one round's state."""

    owner: str
    store: PostgresStore
    claim_db: Database
    admit_db: Database
    lookahead_ms: int = 0
    pids: list[int] = dataclasses.field(default_factory=list)
    claims: list[Claim] = dataclasses.field(default_factory=list)
    decisions: list[tuple[Claim, Decision]] = dataclasses.field(default_factory=list)
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)

    async def refresh(self) -> None:
        """A new round: forget the last one, learn the backends (a lost one is replaced)."""
        self.claims, self.decisions, self.outcomes = [], [], []

        async def pid(conn: Any) -> int:
            return int(await conn.fetchval("SELECT pg_catalog.pg_backend_pid()"))

        self.pids = [await self.claim_db.run(pid), await self.admit_db.run(pid)]

    async def claim(self) -> None:
        self.claims = await self.store.claim(self.owner, BUDGET, LEASE_MS)

    async def decide(self) -> None:
        self.decisions = [(c, decision_of(c, self.lookahead_ms)) for c in self.claims]

    async def settle(self) -> None:
        """What the coordinator does with the decisions: Fires in one admit (a batch when
        more than one), the rest each settled under its fence."""
        fires: list[FireRequest] = []
        for claim, decision in self.decisions:
            match decision:
                case Fire():
                    fires.append(fire_request(claim, decision))
                case Initialize():
                    self.outcomes.append(await self.store.initialize(claim, decision))
                case Skip():
                    self.outcomes.append(await self.store.skip(claim, decision))
                case NotDue():
                    self.outcomes.append(await self.store.release(claim))
        self.outcomes.extend(await self.store.admit(fires))

    async def release(self) -> None:
        """Let go of every claim undecided (a stopping replica)."""
        for claim in self.claims:
            self.outcomes.append(await self.store.release(claim))


class Publisher:
    """``publish`` as the admin role, inside a transaction committed by a later step."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw
        self._tx: Any = None
        self.result: PublishResult | None = None
        self.refused: BaseException | None = None

    async def write(self, spec: PublishFile, *, prune: bool = False) -> None:
        self._tx = self.raw.conn.transaction()
        await self.raw.call(self._tx.start)
        try:
            self.result = await self.raw.call(publish, self.raw.conn, spec, prune=prune)
        except Exception as exc:  # a refused publish is an outcome (nothing was written)
            self.refused = exc
            await self.raw.call(self._tx.rollback)
            self._tx = None

    async def commit(self, project: str, history: History) -> None:
        if self._tx is not None:
            await self.raw.call(self._tx.commit)
            self._tx = None
            await self.raw.call(record_revisions, self.raw.conn, project, history)

    async def abort(self) -> None:
        if self._tx is not None:
            await self.raw.call(self._tx.rollback)
            self._tx = None


@dataclasses.dataclass
class World:
    loop: Any
    stack: contextlib.AsyncExitStack
    superuser_dsn: str
    admin_dsn: str
    runtime_dsn: str

    async def connect(self, dsn: str) -> Raw:
        conn = await trio_asyncio.aio_as_trio(asyncpg.connect, loop=self.loop)(dsn)
        raw = Raw(conn, self.loop)

        async def close() -> None:
            with trio.move_on_after(5, shield=True) as scope:
                await raw.call(conn.close)
            if scope.cancelled_caught:
                conn.terminate()

        self.stack.push_async_callback(close)
        return raw

    async def replica(
        self, owner: str, *, gated: bool, admit_dsn: str | None = None, lookahead_ms: int = 0
    ) -> Replica:
        claim_settings = {**CLAIM_SETTINGS, **({"explorer.gate": "on"} if gated else {})}
        claim_db = await self.stack.enter_async_context(
            open_database(self.runtime_dsn, max_size=1, settings=claim_settings)
        )
        admit_db = await self.stack.enter_async_context(
            open_database(
                admit_dsn or self.runtime_dsn,
                isolation="serializable",
                max_size=1,
                settings=ADMIT_SETTINGS,
            )
        )
        store = PostgresStore(claim_db, admit_db, lookahead_ms=lookahead_ms)
        return Replica(owner, store, claim_db, admit_db, lookahead_ms)


@contextlib.asynccontextmanager
async def open_world(superuser_dsn: str, admin_dsn: str, runtime_dsn: str) -> AsyncIterator[World]:
    """The world on a migrated test database; installs the claim gate (see module doc)."""
    async with trio_asyncio.open_loop() as loop, contextlib.AsyncExitStack() as stack:
        world = World(loop, stack, superuser_dsn, admin_dsn, runtime_dsn)
        su = await world.connect(superuser_dsn)
        await su.execute(GATE_SQL)
        yield world
