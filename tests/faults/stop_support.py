"""Shared pieces of the stop-deadline gates: a server whose runtime role waits long, holds
at chosen statements, table locks, frozen servers, and the checks every gate makes.

The gates' runtime role waits up to 5.5 s for a lock and 6 s for a statement (``TIMEOUTS``),
with an 8 s lease (so a call's client-side budget is 6.5 s): a statement blocked by a gate
is still blocked when a 1-2 s stop deadline passes, and the deadline, not the server's own
timeout, must end it. Role settings are cluster-wide, so every database on a gate server is
made with these timeouts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import asyncpg
import trio
import trio_asyncio

from qlsched.embedded import EmbeddedPostgres
from qlsched.postgres.initdb import init_db
from qlsched.postgres.pool import Database
from qlsched.postgres.timeouts import RoleTimeouts
from tests.support.faults import (
    Baseline,
    GateDb,
    ReplicaProcess,
    every_second_triggers,
    fetch,
    open_su,
    poll,
    publish_triggers,
    seed_cursors,
    verify_end_state,
)
from tests.support.pgproxy import PgProxy, StatementHook, unix_socket_path

TIMEOUTS = RoleTimeouts(
    idle_in_transaction_ms=2000, lock_timeout_ms=5500, statement_timeout_ms=6000
)
LEASE_MS = 8000
CADENCE_MS = 500
CONTRACT_SLACK_S = 1.0
"""The contract: gone within ``stop_timeout_ms`` + 1 s of SIGTERM."""
TRIGGERS = 20


def bound_s(stop_timeout_ms: int) -> float:
    return stop_timeout_ms / 1000 + CONTRACT_SLACK_S


@dataclasses.dataclass
class Gate:
    db: GateDb
    su: Database
    baseline: Baseline
    proxy: PgProxy


@contextlib.asynccontextmanager
async def open_gate(
    server: EmbeddedPostgres,
    name: str,
    *holds: Hold,
    triggers: int = TRIGGERS,
    seed: bool = True,
) -> AsyncIterator[Gate]:
    """A database with every-second triggers (cursors seeded 2.5 s ahead unless ``seed`` is
    False: then they are NULL and a first round initialises them), a superuser pool and a
    proxy to the server that holds the statements of ``holds``, inside a trio-asyncio loop.
    The proxy and every connection through it close when the block ends."""
    async with trio_asyncio.open_loop():
        await init_db(server.dsn(), database=name, timeouts=TIMEOUTS, want_passwords=False)
        db = GateDb(server, name)
        await publish_triggers(db, every_second_triggers(triggers))
        async with open_su(db.superuser_dsn) as su, trio.open_nursery() as nursery:
            baseline = await seed_cursors(su, lead_ms=2500) if seed else {}
            proxy = PgProxy(
                unix_socket_path(server.socket_dir, server.port),
                on_statement=statement_hook(*holds),
            )
            await nursery.start(proxy.serve)
            yield Gate(db, su, baseline, proxy)
            nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def table_locks(dsn: str, tables: Iterable[str]) -> AsyncIterator[None]:
    """Another session holds ACCESS EXCLUSIVE locks on ``tables`` for the block."""
    conn = await trio_asyncio.aio_as_trio(asyncpg.connect)(dsn)
    try:
        await trio_asyncio.aio_as_trio(conn.execute)("BEGIN")
        for table in tables:
            await trio_asyncio.aio_as_trio(conn.execute)(
                f"LOCK TABLE qlsched.{table} IN ACCESS EXCLUSIVE MODE"
            )
        yield
    finally:
        with trio.CancelScope(shield=True):
            await trio_asyncio.aio_as_trio(conn.close)()


async def wait_lock_waiter(su: Database, application: str, *, timeout_s: float = 20) -> None:
    """Until a runtime backend of ``application`` waits for a lock."""

    async def waiting() -> bool:
        rows = await fetch(
            su,
            "SELECT 1 FROM pg_catalog.pg_stat_activity WHERE usename = 'qlsched_runtime'"
            " AND application_name = $1 AND wait_event_type = 'Lock'",
            application,
        )
        return bool(rows)

    await poll(waiting, timeout_s=timeout_s, interval_s=0.02)


async def run_count(su: Database) -> int:
    return int((await fetch(su, "SELECT count(*) FROM qlsched.runs"))[0][0])


async def wait_runs(su: Database, at_least: int, *, timeout_s: float = 30) -> None:
    async def enough() -> bool:
        return await run_count(su) >= at_least

    await poll(enough, timeout_s=timeout_s, interval_s=0.1)


@dataclasses.dataclass
class Hold:
    """Holds every Bind of one statement at the proxy (the client waits for a reply that
    does not come) from ``arm()`` until ``release()``."""

    sql: bytes
    armed: bool = False
    held: trio.Event = dataclasses.field(default_factory=trio.Event)
    released: trio.Event = dataclasses.field(default_factory=trio.Event)

    def arm(self) -> None:
        self.armed = True

    def release(self) -> None:
        self.armed = False
        self.released.set()

    async def __call__(self, sql: bytes) -> None:
        if self.armed and sql == self.sql:
            self.held.set()
            await self.released.wait()


def statement_hook(*holds: Hold) -> StatementHook:
    async def hook(sql: bytes) -> None:
        for hold in holds:
            await hold(sql)

    return hook


def server_pids(server: EmbeddedPostgres) -> list[int]:
    """The postmaster and its children (every process of this server)."""
    root = server.pid
    pids = [root]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == root:
            pids.append(int(stat.parent.name))
    return pids


@contextlib.contextmanager
def frozen(server: EmbeddedPostgres) -> Iterator[None]:
    """Every process of the server SIGSTOPped for the block, SIGCONTinued after."""
    pids = server_pids(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@dataclasses.dataclass
class Stopped:
    code: int | None
    seconds: float
    log: str


async def sigterm_and_time(replica: ReplicaProcess, *, wait_s: float) -> Stopped:
    """SIGTERM the replica and time how long until it is gone (SIGKILL past ``wait_s``)."""
    proc = replica.proc
    assert proc is not None
    assert proc.returncode is None
    started = trio.current_time()
    replica.send(signal.SIGTERM)
    with trio.move_on_after(wait_s):
        await proc.wait()
    seconds = trio.current_time() - started
    if proc.returncode is None:
        await replica.kill()
    return Stopped(proc.returncode, seconds, replica.log_path.read_text(errors="replace"))


def assert_clean_output(log: str) -> None:
    """Every line the process printed is one of its own one-line messages: no traceback."""
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines, "the process printed nothing"
    assert all(line.startswith("qlsched run: ") for line in lines), log


def assert_stopped_within(stopped: Stopped, stop_timeout_ms: int, codes: set[int]) -> None:
    assert stopped.seconds <= bound_s(stop_timeout_ms), (stopped.seconds, stopped.log)
    assert stopped.code in codes, (stopped.code, stopped.log)
    assert_clean_output(stopped.log)


async def assert_exactly_once(gate: Gate, owners: Iterable[str]) -> str:
    """0 duplicates and nothing lost in the seeded window (the database-only verdict)."""
    verdict = await verify_end_state(gate.su, gate.baseline, owners=set(owners))
    assert verdict.problems == []
    return verdict.summary()
