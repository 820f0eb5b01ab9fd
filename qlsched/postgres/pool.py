"""asyncpg pools used from Trio: the only user of trio-asyncio.

Every call crosses the trio-asyncio bridge exactly once: ``Database.run(fn)`` sends one
asyncio coroutine that acquires a connection, runs ``fn(conn)`` (one transaction, or one
statement as an implicit transaction) and releases it: a crossing is costly enough that one
per statement would cut throughput (docs/performance.md, "The trio-asyncio bridge").

Ownership: ``open_database`` owns the pool (and the trio-asyncio loop when none is open)
and closes it on exit. Cancellation: a call cut mid-flight (Trio cancellation, a lost
connection, a client timeout) terminates its connection before the pool gets it back, so a
half-done transaction is never reused; a call the server answered with an error has already
been rolled back by the server (implicit transaction) or by asyncpg's transaction block.

Bounded teardown: closing the pool waits at most ``close_timeout`` or until
``close_deadline`` (not at all when the caller is being cancelled), then terminates what is
left. A connection cut mid-flight leaves
asyncpg side tasks behind (its cancel request, an SSL negotiation) whose futures fail with a
lost connection after nobody awaits them any more; trio-asyncio's own handler would raise
those in the loop's nursery, tearing the loop down under the next crossing. The bridge counts
them (``bridge_errors``) instead: they are the expected noise of discarding dead connections.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final, Literal, TypeAlias, TypeVar

import asyncpg
import msgspec
import trio
import trio_asyncio

from qlsched.exception_groups import single_leaf
from qlsched.postgres.dsn import (
    DsnError,
    as_uri,
    check_dsn,
    database_of,
    describe_dsn_rejection,
)
from qlsched.postgres.errors import (
    CallTimeout,
    DatabaseUnavailable,
    ErrorKind,
    classify,
    describe_connect_error,
)

T = TypeVar("T")
Isolation = Literal["read committed", "serializable"]

Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)

CLOSE_TIMEOUT_S: Final = 5.0
"""Default budget of a graceful pool close before its connections are terminated."""

close_deadline: contextvars.ContextVar[float] = contextvars.ContextVar(
    "close_deadline", default=math.inf
)
"""Trio time by which every pool closed in this context must be closed (or terminated): an
owner stopping several pools, some opened by helpers, sets one deadline for all of them."""

bridge_errors: collections.Counter[str] = collections.Counter()
"""Exception class -> count of asyncio-side errors the bridge swallowed (dead connections'
orphaned futures). Process-wide: read by tests and diagnostics, never reset by the code."""


class PoolStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one pool's connections (``Database.statistics()``)."""

    size: int
    """Connections open, checked out or idle."""
    idle: int
    """Connections open and not checked out."""
    max_size: int


class Database:
    """One asyncpg pool, reached from Trio through a trio-asyncio loop."""

    def __init__(
        self,
        pool: asyncpg.Pool[asyncpg.Record],
        loop: Any,
        *,
        isolation: Isolation,
        acquire_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> None:
        self._pool = pool
        self._loop = loop
        self.isolation = isolation
        self._acquire_timeout = acquire_timeout
        self.call_timeout = call_timeout
        """Client-side budget of one ``run`` (acquire, connect and the call), enforced by
        the owner calling ``cut_overdue`` on a timer; None: none."""
        self._calls: dict[trio.CancelScope, float] = {}
        """In-flight calls (with a budget) -> their deadline, Trio time."""
        self.answering = True
        """False from a call that got no reply within ``call_timeout`` until the server next
        answers one (a result or an error): the database has gone silent."""

    async def run(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on one pooled connection; one bridge crossing for the whole call.

        Raises:
            CallTimeout: the owner's watchdog (``cut_overdue``) found no result within
                ``call_timeout`` (the connection was discarded).
        """
        return await self._watched(self._call, fn)

    async def run_each(self, count: int, fn: Callable[[Connection], Awaitable[object]]) -> None:
        """Run ``fn`` on ``count`` distinct pooled connections (opened as needed), all held
        until the last is done, so no connection is used twice: to prepare a statement on
        each before the first real call needs it. One bridge crossing, one call budget.

        Raises:
            CallTimeout: as ``run``.
        """
        await self._watched(self._call_each, count, fn)

    async def _watched(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``call(*args)`` on the asyncio side, under the call budget (``cut_overdue``)."""
        if self.call_timeout is None:
            result: T = await trio_asyncio.aio_as_trio(call, loop=self._loop)(*args)
            return result
        scope = trio.CancelScope()
        self._calls[scope] = trio.current_time() + self.call_timeout
        try:
            with scope:
                try:
                    result = await trio_asyncio.aio_as_trio(call, loop=self._loop)(*args)
                except asyncpg.PostgresError:
                    self.answering = True
                    raise
                except Exception:
                    if not scope.cancel_called:
                        raise
                    # Cut by the budget, but asyncpg turned the cancellation into its own
                    # error on the way out (a transaction block's rollback on a dead line).
                    self.answering = False
                    raise CallTimeout(f"no reply within {self.call_timeout:g} s") from None
                self.answering = True
                return result
        finally:
            del self._calls[scope]
        assert scope.cancelled_caught
        self.answering = False
        raise CallTimeout(f"no reply within {self.call_timeout:g} s")

    def cut_overdue(self, now: float, stalled_s: float = 0.0) -> None:
        """Cut every call past its ``call_timeout``, first moving each deadline on by
        ``stalled_s``, the time this process itself did not run (a SIGSTOP, a paused VM):
        the database did not keep us waiting then. Called by the pool's owner on a timer;
        a deadline on the call's own scope would fire the moment a stalled process wakes."""
        for scope, deadline in list(self._calls.items()):
            deadline += stalled_s
            self._calls[scope] = deadline
            if now >= deadline:
                scope.cancel()

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
            await self._discard(conn)
            raise
        await self._pool.release(conn)
        return result

    async def _call_each(self, count: int, fn: Callable[[Connection], Awaitable[object]]) -> None:
        """``_call`` nested ``count`` deep: each connection is held while the next is taken,
        and each is released or discarded by ``_call``'s own rule."""
        if count <= 0:
            return

        async def then_the_rest(conn: Connection) -> None:
            await fn(conn)
            await self._call_each(count - 1, fn)

        await self._call(then_the_rest)

    async def _discard(self, conn: Any) -> None:
        """Terminate and hand back a connection cut mid-flight. asyncpg may have done both
        already (a cut inside a transaction block, a failed cancel request): then its
        "released back to the pool" error is expected, counted, and the cut goes on."""
        try:
            conn.terminate()
            await self._pool.release(conn)
        except asyncpg.InterfaceError as exc:
            bridge_errors[type(exc).__name__] += 1

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            size=self._pool.get_size(),
            idle=self._pool.get_idle_size(),
            max_size=self._pool.get_max_size(),
        )


STATEMENT_CACHE_BYTES: Final = 32_768
"""The longest statement a pool's connections keep prepared (asyncpg's
``max_cacheable_statement_size``; its default is 15,360). A longer one is parsed and planned
again at every call, silently: the batch admit, with the comments that say why each part is
as it is, outgrew the default twice."""


async def _create_pool(
    dsn: str,
    min_size: int,
    max_size: int,
    server_settings: dict[str, str],
    connect_timeout: float,
    reset_session: bool,
) -> asyncpg.Pool[asyncpg.Record]:
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        server_settings=server_settings,
        timeout=connect_timeout,
        # Off: asyncpg arms a timer at every release to close a connection idle this long,
        # and cancels it at the next acquire; trio-asyncio's loop keeps a cancelled timer
        # until it would have fired, so a 300 s lifetime held every call's timer (and its
        # context) for five minutes: a replica's memory grew with its work.
        max_inactive_connection_lifetime=0,
        max_cacheable_statement_size=STATEMENT_CACHE_BYTES,
        reset=None if reset_session else _keep_session,
    )


async def _keep_session(conn: Any) -> None:
    """The pool's reset when the session is kept: nothing past asyncpg's own rollback of a
    transaction left open (which it runs before calling this)."""


def _swallow_dead_connection_errors(loop: Any, context: dict[str, Any]) -> None:
    """The loop's exception handler: count what discarding dead connections leaves behind,
    hand anything else (a bug) to trio-asyncio's handler, which raises it."""
    exc = context.get("exception")
    if exc is None or isinstance(exc, asyncio.CancelledError) or _is_dead_connection(exc):
        bridge_errors[type(exc).__name__ if exc is not None else "message"] += 1
        return
    loop.default_exception_handler(context)


@contextmanager
def _handler_installed(loop: Any) -> Iterator[None]:
    """Install the bridge's exception handler unless the loop's owner set one of its own."""
    if loop.get_exception_handler() is not None:
        yield
        return
    loop.set_exception_handler(_swallow_dead_connection_errors)
    try:
        yield
    finally:
        if not loop.is_closed():
            loop.set_exception_handler(None)


@asynccontextmanager
async def _bridge() -> AsyncIterator[Any]:
    loop = trio_asyncio.current_loop.get()
    if loop is not None:
        with _handler_installed(loop):
            yield loop
        return
    body_raised = False
    try:
        async with trio_asyncio.open_loop() as new_loop:
            with _handler_installed(new_loop):
                try:
                    yield new_loop
                except BaseException:
                    body_raised = True
                    raise
    except BaseExceptionGroup as group:
        # open_loop runs nurseries, which wrap what our own code raised; hand callers the
        # one exception they can handle (a DatabaseUnavailable, a Cancelled) when it is one.
        leaf = single_leaf(group)
        if leaf is None:
            raise
        if not body_raised and _is_dead_connection(leaf):
            # The loop's teardown awaited a task of a discarded connection: expected.
            bridge_errors[type(leaf).__name__] += 1
            return
        raise leaf from None


def _is_dead_connection(exc: BaseException) -> bool:
    return isinstance(exc, Exception) and classify(exc) is ErrorKind.CONNECTION


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
    call_timeout: float | None = None,
    close_timeout: float = CLOSE_TIMEOUT_S,
    reset_session: bool = True,
) -> AsyncIterator[Database]:
    """Open a pool whose connections default to ``isolation``; close it on exit.

    ``reset_session=False`` hands a released connection back as it is instead of running
    asyncpg's reset (``RESET ALL``, ``UNLISTEN *``, advisory unlocks: a round trip and its
    server work at every call, as much as a claim itself). Only for pools whose statements
    leave no session state behind; an open transaction is still rolled back.

    ``acquire_timeout`` bounds the wait for a free connection in ``Database.run``
    (``TimeoutError`` past it); None waits as long as the caller's scope allows.
    ``call_timeout`` bounds each ``Database.run`` on the client side (see ``Database``);
    ``close_timeout`` bounds the graceful close on exit (and ``close_deadline``, when the
    owner set one), after which the remaining connections are terminated.

    Cancellation:
        Leaving the block while cancelled terminates the connections at once (no graceful
        close). The close never raises: errors from closing dead connections are expected.

    Raises:
        DsnError: the DSN is malformed (checked before connecting).
        DatabaseUnavailable: the first connection failed; the message names the class of
            problem (never the DSN, password or driver text).
    """
    dsn = as_uri(dsn)  # libpq's keyword=value form too
    check_dsn(dsn)
    server_settings = {
        "application_name": application_name,
        "default_transaction_isolation": isolation,
        **(settings or {}),
    }
    async with _bridge() as loop:
        with _connect_errors(dsn):
            pool = await trio_asyncio.aio_as_trio(_create_pool, loop=loop)(
                dsn, min_size, max_size, server_settings, connect_timeout, reset_session
            )
        db = Database(
            pool,
            loop,
            isolation=isolation,
            acquire_timeout=acquire_timeout,
            call_timeout=call_timeout,
        )
        try:
            yield db
        finally:
            deadline = min(trio.current_time() + close_timeout, close_deadline.get())
            await _close_pool(pool, loop, deadline)


async def _close_pool(pool: asyncpg.Pool[asyncpg.Record], loop: Any, deadline: float) -> None:
    """Close gracefully until ``deadline`` (shielded), else terminate; never raise an error
    of a dead connection. A cancelled caller gets no graceful close: it asked to be cut."""
    closed = False
    if trio.current_effective_deadline() != -math.inf:
        with trio.move_on_at(deadline, shield=True):
            try:
                await trio_asyncio.aio_as_trio(pool.close, loop=loop)()
                closed = True
            except Exception as exc:
                bridge_errors[type(exc).__name__] += 1
    if not closed:
        try:
            pool.terminate()
        except Exception as exc:
            bridge_errors[type(exc).__name__] += 1


async def connect_once(
    dsn: str, fn: Callable[[Connection], Awaitable[T]], *, connect_timeout: float = 10.0
) -> T:
    """Open one connection, run ``fn``, close it: for CLI tools (init-db, check, publish).

    Raises:
        DsnError: the DSN is malformed (checked before connecting).
        DatabaseUnavailable: the connection failed.
    """
    dsn = as_uri(dsn)  # libpq's keyword=value form too
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
