"""``qlsched work [--dsn WORKER_DSN] [--concurrency N] [--lease-ms N] [--stop-timeout-ms N]
[--http HOST:PORT]``:
run queued Runs' commands as child processes (docs/contract.md §13), as ``qlsched_worker``.

Without ``--dsn`` (or ``QLSCHED_WORKER_DSN``) it works the local database, like every other
command. Before the first claim: the DSN's role is checked (another role is named, exit 2)
and the schema must be ready (exit 1 otherwise). SIGINT/SIGTERM stop claiming at once, let
running jobs finish within the stop timeout, then stop them (SIGTERM, SIGKILL after the
grace) and leave their leases to expire. One line per finished job on stderr; with
``--http``, Prometheus ``/metrics`` (claims, outcomes by code, durations, lost leases,
retries).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from functools import partial

import msgspec
import trio

from qlsched.allocator import hold_mmap_threshold
from qlsched.commands._common import run_command
from qlsched.commands._local import local_dsn
from qlsched.core.config import ConfigError
from qlsched.core.control import id_pair
from qlsched.core.specs import ID_RULE
from qlsched.core.tomlfile import printable
from qlsched.postgres.errors import SchemaNotReady
from qlsched.postgres.login import WORKER, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.readiness import check_readiness
from qlsched.signals import watch_signals
from qlsched.worker import WorkerConfig, WorkerMetrics, serve_worker
from qlsched.worker.http import serve_worker_http

DSN_ENV = "QLSCHED_WORKER_DSN"
READINESS_LEASE_MS = 30_000
"""The scheduler's default lease, which readiness compares the runtime's timeouts against
(the worker's own lease is not the runtime's)."""


def _bounded(name: str, value: int | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if not low <= value <= high:
        raise ConfigError(f"--{name.replace('_', '-')}: {value} is not within {low}..{high}")
    return value


def _tasks(values: list[str] | None) -> tuple[str, ...] | None:
    """``--task PROJECT/TASK`` (repeatable), each part an id, checked before any connection."""
    if not values:
        return None
    for value in values:
        if id_pair(value) is None:
            raise ConfigError(f"--task {printable(value)}: expected PROJECT/TASK, each {ID_RULE}")
    return tuple(dict.fromkeys(values))


def config_of(args: argparse.Namespace, dsn: str) -> WorkerConfig:
    """The worker's settings from the flags, validated before any connection (exit 2)."""
    lease = _bounded("lease_ms", args.lease_ms, 30_000, 1_000, 3_600_000)
    stop = _bounded("stop_timeout_ms", args.stop_timeout_ms, 10_000, 0, 3_600_000)
    if stop >= lease:
        raise ConfigError(f"--stop-timeout-ms ({stop}) must be below --lease-ms ({lease})")
    return WorkerConfig(
        dsn=dsn,
        worker_id=args.worker_id or "",
        concurrency=_bounded("concurrency", args.concurrency, 4, 1, 256),
        lease_ms=lease,
        stop_timeout_ms=stop,
        poll_ms=_bounded("poll_ms", args.poll_ms, 500, 10, 60_000),
        tasks=_tasks(args.task),
    )


async def _check(conn: Connection) -> None:
    require(await read_login(conn, WORKER), command="work", role=WORKER)
    report = await check_readiness(conn, lease_ms=READINESS_LEASE_MS)
    if not report.ready:
        raise SchemaNotReady(
            f"schema not ready: {report.findings[0]} (see qlsched check)", report.findings
        )


def _log(line: str) -> None:
    print(f"qlsched work: {line}", file=sys.stderr, flush=True)


async def work(config: WorkerConfig, http: str | None = None) -> int:
    await connect_once(config.dsn, _check)
    stop = trio.Event()
    metrics = WorkerMetrics()
    async with trio.open_nursery() as nursery:
        await nursery.start(watch_signals, (signal.SIGINT, signal.SIGTERM), lambda _: stop.set())
        if http is not None:
            host, _, port = http.rpartition(":")
            bound = await nursery.start(serve_worker_http, metrics, host.strip("[]"), int(port))
            _log(f"metrics on {bound}/metrics")
        async with trio.open_nursery() as service:
            worker_id = await service.start(
                partial(serve_worker, config, stop=stop, metrics=metrics, log=_log)
            )
            _log(
                f"{worker_id} working (concurrency {config.concurrency},"
                f" lease {config.lease_ms} ms"
                + ("" if config.tasks is None else f", only tasks {', '.join(config.tasks)}")
                + ")"
            )
            print("ready", flush=True)
            await stop.wait()
            _log("stopping: no more claims; running jobs may finish")
        nursery.cancel_scope.cancel()  # the signal watcher
    s = metrics.statistics()
    _log(
        f"stopped: {s.claims} claimed, outcomes {dict(sorted(s.outcomes.items()))},"
        f" {s.lost_leases} lost leases, {s.retries} retries"
    )
    return 0


def _http(value: str | None) -> str | None:
    """``HOST:PORT`` checked before any connection (bad input, exit 2)."""
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--http {value!r}: expected HOST:PORT")
    return value


def main(args: argparse.Namespace) -> int:
    hold_mmap_threshold()  # a long-running process: its memory must not creep (allocator)

    async def body() -> int:
        dsn = args.dsn or os.environ.get(DSN_ENV)
        config = config_of(args, dsn or "postgresql://unused")
        if not dsn:
            dsn = await local_dsn("work", args.data_dir, args.pg_bindir, WORKER)
            config = msgspec.structs.replace(config, dsn=dsn)
        return await work(config, _http(args.http))

    return run_command("work", body)


def add_arguments(work: argparse.ArgumentParser) -> None:
    work.add_argument("--dsn", help="PostgreSQL DSN (worker; also QLSCHED_WORKER_DSN)")
    for flag, text in (
        ("--concurrency", "jobs at once (default 4)"),
        ("--lease-ms", "the lease on each claimed Attempt (default 30000)"),
        ("--stop-timeout-ms", "on SIGTERM, how long running jobs may finish (default 10000)"),
        ("--poll-ms", "how often to look for queued Runs when idle (default 500)"),
    ):
        work.add_argument(flag, type=int, metavar="N", help=text)
    work.add_argument("--worker-id", help="the name recorded on Attempts (default: random)")
    work.add_argument(
        "--task",
        action="append",
        metavar="PROJECT/TASK",
        help="take only this task's Runs (repeatable; default: every task)",
    )
    work.add_argument("--http", metavar="HOST:PORT", help="serve /metrics and /healthz here")
    work.add_argument("--pg-bindir", help="PostgreSQL server binaries for the local database")
    work.add_argument("--data-dir", help="data directory of the local database")
