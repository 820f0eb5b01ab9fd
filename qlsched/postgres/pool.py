"""asyncpg pools used from Trio: the only user of trio-asyncio.

Every call crosses the trio-asyncio bridge exactly once: ``Database.run(fn)`` sends one
asyncio coroutine that acquires a connection, runs ``fn(conn)`` (one transaction, or one
statement as an implicit transaction) and releases it. Per-statement crossings were
measured to halve throughput (a crossing costs ~56 µs here).

Ownership: ``open_database`` owns the pool (and the trio-asyncio loop when none is open)
and closes it on exit. Cancellation: a call cut mid-flight (Trio cancellation, a lost
connection, a client timeout) terminates its connection before the pool gets it back, so a
half-done transaction is never reused; a call the server answered with an error has already
been rolled back by the server (implicit transaction) or by asyncpg's transaction block.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal, TypeAlias, TypeVar

import asyncpg
import trio
import trio_asyncio

from qlsched.postgres.dsn import DsnError, check_dsn, database_of, describe_dsn_rejection
from qlsched.postgres.errors import DatabaseUnavailable, describe_connect_error

T = TypeVar("T")
Isolation = Literal["read committed", "serializable"]

Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)


class Database:
    """One asyncpg pool, reached from Trio through a trio-asyncio loop."""

    def __init__(
        self,
        pool: asyncpg.Pool[asyncpg.Record],
        loop: Any,
        *,
        isolation: Isolation,
        acquire_timeout: float | None = None,
    ) -> None:
        self._pool = pool
        self._loop = loop
        self.isolation = isolation
        self._acquire_timeout = acquire_timeout

    async def run(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on one pooled connection; one bridge crossing for the whole call."""
        result: T = await trio_asyncio.aio_as_trio(self._call, loop=self._loop)(fn)
        return result

    async def _call(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        # TimeoutError when no connection is free within ``acquire_timeout`` (None: wait).
        conn = await self._pool.acquire(timeout=self._acquire_timeout)
        try:
            result = await fn(conn)
        except asyncpg.PostgresError:
            # The server answered: the transaction is already over; the connection is sound.
            await self._pool.release(conn)
            raise
        except BaseException:
            # Cut mid-flight: the server may be inside a transaction. Discard, never reuse.
            conn.terminate()
            await self._pool.release(conn)
            raise
        await self._pool.release(conn)
        return result

    def statistics(self) -> dict[str, int]:
        return {
            "size": self._pool.get_size(),
            "idle": self._pool.get_idle_size(),
            "max": self._pool.get_max_size(),
        }


async def _create_pool(
    dsn: str,
    min_size: int,
    max_size: int,
    server_settings: dict[str, str],
    connect_timeout: float,
) -> asyncpg.Pool[asyncpg.Record]:
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        server_settings=server_settings,
        timeout=connect_timeout,
        max_inactive_connection_lifetime=300.0,
    )


@asynccontextmanager
async def _bridge() -> AsyncIterator[Any]:
    loop = trio_asyncio.current_loop.get()
    if loop is not None:
        yield loop
        return
    try:
        async with trio_asyncio.open_loop() as new_loop:
            yield new_loop
    except BaseExceptionGroup as group:
        # open_loop runs nurseries, which wrap what our own code raised; hand callers the
        # one exception they can handle (a DatabaseUnavailable, a Cancelled) when it is one.
        leaf = _single_leaf(group)
        if leaf is None:
            raise
        raise leaf from None


def _single_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


@contextmanager
def _connect_errors(dsn: str) -> Iterator[None]:
    """Turn a failed connect into our errors: the driver's own DSN rejection (a ValueError)
    is ``DsnError`` (bad input), anything else ``DatabaseUnavailable`` with a safe message."""
    try:
        yield
    except ValueError as exc:
        raise DsnError(describe_dsn_rejection(dsn, exc)) from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        raise DatabaseUnavailable(describe_connect_error(exc, database=database_of(dsn))) from None


async def connect(dsn: str, *, connect_timeout: float) -> Connection:
    """One connection, opened on the asyncio side (inside a bridge crossing)."""
    with _connect_errors(dsn):
        conn: Connection = await asyncpg.connect(dsn, timeout=connect_timeout)
    return conn


@asynccontextmanager
async def open_database(
    dsn: str,
    *,
    isolation: Isolation = "read committed",
    min_size: int = 1,
    max_size: int = 4,
    application_name: str = "qlsched",
    settings: Mapping[str, str] | None = None,
    connect_timeout: float = 10.0,
    acquire_timeout: float | None = None,
) -> AsyncIterator[Database]:
    """Open a pool whose connections default to ``isolation``; close it on exit.

    ``acquire_timeout`` bounds the wait for a free connection in ``Database.run``
    (``TimeoutError`` past it); None waits as long as the caller's scope allows.

    Raises:
        DsnError: the DSN is malformed (checked before connecting).
        DatabaseUnavailable: the first connection failed; the message names the class of
            problem (never the DSN, password or driver text).
    """
    check_dsn(dsn)
    server_settings = {
        "application_name": application_name,
        "default_transaction_isolation": isolation,
        **(settings or {}),
    }
    async with _bridge() as loop:
        with _connect_errors(dsn):
            pool = await trio_asyncio.aio_as_trio(_create_pool, loop=loop)(
                dsn, min_size, max_size, server_settings, connect_timeout
            )
        try:
            yield Database(pool, loop, isolation=isolation, acquire_timeout=acquire_timeout)
        finally:
            with trio.move_on_after(5, shield=True) as scope:
                await trio_asyncio.aio_as_trio(pool.close, loop=loop)()
            if scope.cancelled_caught:
                pool.terminate()


async def connect_once(
    dsn: str, fn: Callable[[Connection], Awaitable[T]], *, connect_timeout: float = 10.0
) -> T:
    """Open one connection, run ``fn``, close it: for CLI tools (init-db, check, publish).

    Raises:
        DsnError: the DSN is malformed (checked before connecting).
        DatabaseUnavailable: the connection failed.
    """
    check_dsn(dsn)

    async def call() -> T:
        conn = await connect(dsn, connect_timeout=connect_timeout)
        try:
            return await fn(conn)
        finally:
            await conn.close(timeout=5)

    async with _bridge() as loop:
        result: T = await trio_asyncio.aio_as_trio(call, loop=loop)()
        return result
