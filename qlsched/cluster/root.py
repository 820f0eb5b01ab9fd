"""The composition root: one replica of cluster control, started and stopped in order.

Start (the ADR's order): validate config → open pools → schema readiness → startup
recovery → prepare the admit on each admit connection → start the lifecycle → open HTTP
admission. Stop is the reverse, by construction
of the ``async with`` chain: withdraw admission (readiness 503, listener closed) → stop and
drain the scheduler (bounded by ``stop_timeout_ms``) → close the pools. A readiness failure
raises ``SchemaNotReady`` before the lifecycle exists, so it never starts; a database error
during readiness, recovery or the admit's preparation (a lock wait or statement timeout,
no reply, a lost connection) raises ``StartupFailed`` with one line naming the step and
the cause.

The stop deadline holds whatever the database does: every call has a client-side budget
(``call_timeout_s``: a silent server is noticed within the lease), the drain is cut at
``stop_timeout_ms``, the root waits ``DRAIN_SLACK_S`` more for the cut round to unwind and
then cancels it, and the pools get ``POOL_CLOSE_S`` together to close before they are terminated.

Ownership: ``open_cluster_control`` owns every task, pool and listener it opens; nothing
outlives its block. Only this module hands its nursery to services (``nursery.start``).
The embedder's block runs inside those nurseries, so the root hands an error raised there
back as itself, not wrapped in their ``ExceptionGroup``: ``except KeyError`` around the
block sees the ``KeyError``, whatever the pools below do with groups.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final, TypeVar

import msgspec
import trio

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.http import AdmissionApp, serve_http
from qlsched.cluster.lifecycle import Lifecycle, LifecycleStatistics
from qlsched.cluster.requests import RequestsPass
from qlsched.cluster.retention import Pruner, RetentionMetrics
from qlsched.cluster.runs_pass import RunsPass
from qlsched.core.config import Config, ConfigError
from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.lease import call_timeout_s
from qlsched.engine.passes import Passes
from qlsched.exception_groups import single_leaf_unwrapped
from qlsched.metrics import Metrics
from qlsched.postgres.errors import (
    SchemaNotReady,
    StartupFailed,
    describe_database_error,
    is_database_error,
)
from qlsched.postgres.pool import Connection, Database, close_deadline, open_database
from qlsched.postgres.reader import PostgresReader, open_reader
from qlsched.postgres.readiness import Readiness, check_readiness
from qlsched.postgres.recovery import RecoveryReport, recover
from qlsched.postgres.requests import PostgresRequestStore
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS, PostgresStore
from qlsched.sinks import StreamSink

DRAIN_SLACK_S: Final = 0.25
"""Beyond ``stop_timeout_ms``, how long the root waits for the cut round to unwind before it
cancels the lifecycle's task."""
POOL_CLOSE_S: Final = 0.3
"""Budget of the pools' graceful close at stop (one deadline for all three, the HTTP
reader's included); then their connections are terminated."""

T = TypeVar("T")


WATCH_S: Final = 0.25
"""How often the root's watchdog cuts database calls past their budget."""
STALL_S: Final = 1.0
"""A watchdog tick this much later than due means this process did not run (a SIGSTOP, a
paused VM): the calls in flight get that time back."""


ADMIT_CONNECTIONS: Final = 2
"""The admit pool's size: a round's admit and the admit of Fires held ahead run at once."""


async def _watch_calls(dbs: tuple[Database, ...]) -> None:
    last = trio.current_time()
    while True:
        await trio.sleep(WATCH_S)
        now = trio.current_time()
        late = now - last - WATCH_S
        last = now
        for db in dbs:
            db.cut_overdue(now, late if late > STALL_S else 0.0)


@asynccontextmanager
async def _own_close_deadline() -> AsyncIterator[None]:
    """The pools' shared close deadline (set at stop) for this control only."""
    token = close_deadline.set(math.inf)
    try:
        yield
    finally:
        close_deadline.reset(token)


@asynccontextmanager
async def _watching_calls(dbs: tuple[Database, ...]) -> AsyncIterator[None]:
    """Enforce the pools' call budgets for the block (start-up included); the block's own
    exception comes out as itself, not wrapped in the watchdog's nursery group."""
    with single_leaf_unwrapped():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_calls, dbs, name="qlsched.watch_calls")
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()


def _session_settings(config: Config) -> dict[str, str]:
    """The replica's own sessions' timeouts, from its config (the runtime role's settings,
    which readiness checks, stay the default for every other session of the role)."""
    return {"idle_in_transaction_session_timeout": f"{config.idle_in_transaction_timeout_ms}ms"}


async def _serve_http_in(
    scope: trio.CancelScope,
    app: AdmissionApp,
    address: tuple[str, int],
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """HTTP admission until ``scope`` is cancelled (the first step of the stop order)."""
    with scope:
        await serve_http(app, address[0], address[1], task_status=task_status)


async def _startup_step(step: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run a start-up step; a database error becomes one line naming the step and cause."""
    try:
        return await call()
    except Exception as exc:
        if not is_database_error(exc):
            raise
        raise StartupFailed(f"{step}: {describe_database_error(exc)}") from None


class ControlStatistics(msgspec.Struct, frozen=True):
    owner: str
    lifecycle: LifecycleStatistics
    http: tuple[str, int] | None
    ssi_retries: int
    admit_statements: int


@dataclasses.dataclass(eq=False)
class ClusterControl:
    """A running replica. Read-only for callers, except ``request_stop``."""

    config: Config
    store: PostgresStore
    """The adapter; it counts its admit statements and their retries."""
    metrics: Metrics
    lifecycle: Lifecycle
    readiness: Readiness
    """What the start-up readiness check found (ready, or ``SchemaNotReady`` was raised)."""
    recovery: RecoveryReport
    trace: list[str]
    """The start/stop steps in the order they happened (tests check the order)."""
    http_address: tuple[str, int] | None = None
    app: AdmissionApp | None = None
    pruner: Pruner | None = None
    """Deletes finished Runs past the retention, beside the rounds (``cluster.retention``)."""
    _stop_requested: trio.Event = dataclasses.field(
        default_factory=trio.Event, init=False, repr=False
    )

    def request_stop(self) -> None:
        """Ask ``serve`` (or any waiter on ``wait_stop_requested``) to stop gracefully."""
        self._stop_requested.set()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    def statistics(self) -> ControlStatistics:
        return ControlStatistics(
            owner=self.config.owner,
            lifecycle=self.lifecycle.statistics(),
            http=self.http_address,
            ssi_retries=self.store.ssi_retries,
            admit_statements=self.store.admit_statements,
        )


@asynccontextmanager
async def open_cluster_control(
    config: Config, *, sink: DiagnosticSink | None = None
) -> AsyncIterator[ClusterControl]:
    """Run one replica for the duration of the block; leaving it stops in order.

    Raises:
        ConfigError: the configuration has no DSN (nothing was opened); a ``Config`` out of
            bounds cannot be built at all.
        DatabaseUnavailable: the database could not be reached.
        StartupFailed: readiness, recovery or the admit warm-up hit a database error (a
            lock or statement timeout, no reply, a lost connection); the message names the
            step and cause.
        SchemaNotReady: readiness failed; the message lists every finding.

    Cancellation:
        Leaving the block normally (or by an exception from the body) drains within
        ``stop_timeout_ms`` and returns within ``stop_timeout_ms`` + 1 s whatever the
        database does; ``statistics().lifecycle.cut_at_deadline`` says whether work was cut.
        Cancelling the enclosing scope cuts everything at once (no drain, no graceful pool
        close) and leaves in-flight claims to expire. An exception raised in the block
        reaches the caller as itself, after the same stop.
    """
    if not config.dsn:
        raise ConfigError("dsn: a runtime DSN is required (flag --dsn or QLSCHED_DSN)")
    if sink is None:
        sink = StreamSink(replica=config.owner)
    trace: list[str] = []
    pool_size = max(2, min(config.claim_budget, 8))
    call_timeout = call_timeout_s(config.lease_ms, config.cadence_ms)
    # Claims: READ COMMITTED, generic plans; admits: SERIALIZABLE, index probes only (see
    # CLAIM_SETTINGS, ADMIT_SETTINGS). The claim pool keeps its sessions (asyncpg's reset
    # doubled each call's round trips); the admit pool resets (docs/performance.md, Pools).
    async with (
        _own_close_deadline(),
        open_database(
            config.dsn,
            max_size=pool_size,
            application_name="qlsched-claim",
            settings={**CLAIM_SETTINGS, **_session_settings(config)},
            call_timeout=call_timeout,
            close_timeout=POOL_CLOSE_S,
            reset_session=False,
        ) as claim_db,
        open_database(
            config.dsn,
            isolation="serializable",
            max_size=ADMIT_CONNECTIONS,
            application_name="qlsched-admit",
            settings={**ADMIT_SETTINGS, **_session_settings(config)},
            call_timeout=call_timeout,
            close_timeout=POOL_CLOSE_S,
        ) as admit_db,
        # HTTP reads: a pool of their own, so requests can never hold a scheduler connection.
        open_reader(config.dsn) as http_reader,
        _watching_calls((claim_db, admit_db)),
    ):
        trace.append("pools_opened")
        readiness, recovery = await _start_up(claim_db, config, sink, trace)
        control = _assemble(config, sink, (claim_db, admit_db), readiness, recovery, trace)
        await _warm_up(control.store, config.owner, trace)
        lifecycle = control.lifecycle
        try:
            # The embedder's block runs inside this nursery: its error comes out as itself.
            with single_leaf_unwrapped():
                async with trio.open_nursery() as nursery:
                    await nursery.start(lifecycle.run, name=f"qlsched.lifecycle({config.owner})")
                    trace.append("lifecycle_started")
                    if control.pruner is not None:
                        await nursery.start(
                            control.pruner.run, name=f"qlsched.retention({config.owner})"
                        )
                    http_scope = trio.CancelScope()
                    await _open_http(nursery, http_scope, control, http_reader, sink)
                    try:
                        yield control
                    finally:
                        await _stop_in_order(nursery, http_scope, control)
        finally:
            trace.append("pools_closing")


async def _warm_up(store: PostgresStore, owner: str, trace: list[str]) -> None:
    """Each admit connection prepares the admit before the first due row waits on it."""
    await _startup_step("admit warm-up", lambda: store.warm(owner, ADMIT_CONNECTIONS))
    trace.append("admit_prepared")


async def _start_up(
    claim_db: Database, config: Config, sink: DiagnosticSink, trace: list[str]
) -> tuple[Readiness, RecoveryReport]:
    """Readiness (every finding raised as ``SchemaNotReady``), then start-up recovery."""

    async def ready_fn(conn: Connection) -> Readiness:
        return await check_readiness(conn, lease_ms=config.lease_ms)

    readiness = await _startup_step("readiness", lambda: claim_db.run(ready_fn))
    if not readiness.ready:
        sink.emit(Diagnostic(code="schema_not_ready", count=len(readiness.findings)))
        raise SchemaNotReady(
            "schema not ready: " + "; ".join(readiness.findings), readiness.findings
        )
    trace.append("ready")
    recovery = await _startup_step(
        "start-up recovery", lambda: recover(claim_db, replica=config.owner)
    )
    if recovery.marked:
        sink.emit(Diagnostic(code="recovery_marked", count=recovery.marked))
    trace.append("recovered")
    return readiness, recovery


def _assemble(
    config: Config,
    sink: DiagnosticSink,
    dbs: tuple[Database, Database],
    readiness: Readiness,
    recovery: RecoveryReport,
    trace: list[str],
) -> ClusterControl:
    """The replica's parts over its claim and admit pools: stores, metrics, the round
    engine with its requests pass, the lifecycle, and the pruner beside it."""
    claim_db, admit_db = dbs
    store = PostgresStore(
        claim_db,
        admit_db,
        retries=config.admit_retries,
        sink=sink,
        lookahead_ms=config.lookahead_ms,
    )
    metrics = Metrics(admit_counts=store)
    requests = PostgresRequestStore(claim_db, admit_db, retries=config.admit_retries, sink=sink)
    coordinator = Coordinator(
        store,
        config,
        sink,
        metrics,
        requests=Passes(
            [
                RequestsPass(requests, config, sink, metrics, budget=config.claim_budget),
                RunsPass(claim_db, config, sink, metrics),
            ]
        ),
    )
    lifecycle = Lifecycle(
        coordinator, config, answering=lambda: claim_db.answering and admit_db.answering
    )
    pruner = Pruner(
        claim_db,
        owner=config.owner,
        cadence_ms=config.cadence_ms,
        sink=sink,
        metrics=RetentionMetrics(metrics.registry),
    )
    return ClusterControl(
        config, store, metrics, lifecycle, readiness, recovery, trace, pruner=pruner
    )


async def _open_http(
    nursery: trio.Nursery,
    http_scope: trio.CancelScope,
    control: ClusterControl,
    http_reader: PostgresReader,
    sink: DiagnosticSink,
) -> None:
    """Serve ``/healthz``, ``/readyz``, ``/metrics`` and ``/v1/schedules`` when configured."""
    config = control.config
    address = config.http_address()
    if address is None:
        return
    app = AdmissionApp(
        lifecycle=control.lifecycle,
        metrics=control.metrics,
        reader=http_reader,
        sink=sink,
        replica=config.owner,
        token=config.http_token,
        actions=http_reader,
    )
    control.http_address = await nursery.start(
        _serve_http_in, http_scope, app, address, name=f"qlsched.http({config.owner})"
    )
    control.app = app
    control.trace.append("http_opened")


async def _stop_in_order(
    nursery: trio.Nursery, http_scope: trio.CancelScope, control: ClusterControl
) -> None:
    """Withdraw admission, stop the lifecycle and drain within the stop budget (at once
    when the embedder's scope is cancelled), then set the pools' close deadline."""
    trace = control.trace
    if control.app is not None:
        control.app.withdraw()
        http_scope.cancel()
        trace.append("http_closed")
    control.lifecycle.stop()
    if control.pruner is not None:
        control.pruner.stop()
    if trio.current_effective_deadline() == -math.inf:
        # The embedder's scope is cancelled: cut at once, no drain.
        nursery.cancel_scope.cancel()
    else:
        budget = control.config.stop_timeout_ms / 1000 + DRAIN_SLACK_S
        with trio.move_on_after(budget, shield=True):
            await control.lifecycle.wait_stopped()
        # A round that did not unwind by now is cancelled outright.
        nursery.cancel_scope.cancel()
    trace.append("lifecycle_stopped")
    close_deadline.set(trio.current_time() + POOL_CLOSE_S)


async def serve(
    config: Config,
    *,
    sink: DiagnosticSink | None = None,
    task_status: trio.TaskStatus[ClusterControl] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``await nursery.start(qlsched.serve, config)``: run a replica until
    ``control.request_stop()`` (graceful, in order) or cancellation (immediate)."""
    async with open_cluster_control(config, sink=sink) as control:
        task_status.started(control)
        await control.wait_stop_requested()
