"""``qlsched run``: one cluster-control replica until SIGINT or SIGTERM, then stop in order.

Config is validated before anything connects (exit 2 on a bad value). Then, once, before the
replica starts: the ``--http`` address is tried (a port in use is one line, exit 1), and the
DSN's role is read (an admin or observer DSN is named, exit 2; a superuser is warned about;
a database without the schema says to run ``init-db``). Without a DSN the replica runs on the
local database (``qlsched local``), started on first use and left running when it stops.

On SIGINT/SIGTERM: withdraw admission, drain the scheduler within ``stop_timeout_ms``, close
the pools; exit 0 after a clean stop, 3 when the deadline cut a round in flight (its claims
are left to expire). Either way the process is gone within ``stop_timeout_ms`` + 1 s,
whatever the database does; a signal during start-up cuts the start at once (exit 0).
``--summary SECONDS`` prints a one-line summary of the
replica's counters at that interval (default: every 10 s when stderr is a terminal).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import sys
from typing import IO, Final

import msgspec
import trio

from qlsched.allocator import hold_mmap_threshold
from qlsched.cluster.root import ClusterControl, open_cluster_control
from qlsched.commands._common import fail, run_command
from qlsched.commands._local import local_dsn
from qlsched.commands.options import (
    DATABASE_OPTIONS,
    add_config_options,
    add_database_options,
)
from qlsched.core.config import FLAGS, Config, ConfigError
from qlsched.core.shown import shown
from qlsched.metrics import registry_reader
from qlsched.postgres.errors import SchemaNotReady
from qlsched.postgres.login import RUNTIME, Login, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.readable_sink import ReadableSink, diagnostics_sink
from qlsched.settings import given_flags, load_config
from qlsched.signals import watch_signals
from qlsched.sinks import route_library_logs
from qlsched.summary import Summary, summary_interval

STOPPED_AT_DEADLINE: Final = 3
"""Exit code: stopped in time, but the deadline cut work in flight."""
_LISTEN_ERRORS: Final = {
    errno.EADDRINUSE: "the address is already in use (another replica or service?)",
    errno.EADDRNOTAVAIL: "the address is not on this machine",
    errno.EACCES: "permission denied (a port below 1024 needs privileges)",
}


class CannotListen(Exception):
    """The ``--http`` address cannot be bound (exit 1: the machine, not the input)."""


def _listen_error(host: str, port: int, exc: OSError) -> CannotListen:
    why = _LISTEN_ERRORS.get(exc.errno or 0, exc.strerror or type(exc).__name__)
    return CannotListen(f"cannot listen on {host}:{port}: {why}")


def check_listen(address: tuple[str, int] | None) -> None:
    """Bind and release the HTTP address once, so a port in use fails before anything
    connects (hypercorn would raise it from inside the started replica)."""
    if address is None or address[1] == 0:
        return
    host, port = address
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise CannotListen(f"cannot listen on {host}:{port}: unknown host") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # The same option hypercorn sets, so a port in TIME_WAIT is not taken for in use.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            raise _listen_error(host, port, exc) from None


def _short_not_ready(exc: SchemaNotReady) -> SchemaNotReady:
    """The first finding, and a pointer to ``check`` for the rest: one short line."""
    if len(exc.findings) <= 1:
        return exc
    more = len(exc.findings) - 1
    return SchemaNotReady(
        f"schema not ready: {exc.findings[0]} (and {more} more: run qlsched check)",
        exc.findings,
    )


async def check_login(dsn: str) -> Login:
    """Read once who ``dsn`` logs in as; raise unless it may run a replica, warn for a
    superuser (it works, but bypasses every grant the fence relies on being exact)."""

    async def fn(conn: Connection) -> Login:
        return await read_login(conn, RUNTIME)

    login = await connect_once(dsn, fn)
    require(login, command="run", role=RUNTIME)
    if login.superuser:
        print(
            f"qlsched run: warning: this DSN logs in as superuser {login.login}; "
            f"a replica should log in as {RUNTIME}",
            file=sys.stderr,
            flush=True,
        )
    return login


async def _print_summaries(control: ClusterControl, interval_s: float) -> None:
    summary = Summary(registry_reader(control.metrics.registry))
    while True:
        await trio.sleep(interval_s)
        print(f"qlsched run: {summary.line(interval_s)}", file=sys.stderr, flush=True)


def _say(line: str) -> None:
    print(f"qlsched run: {line}", file=sys.stderr, flush=True)


async def run_replica(
    config: Config, stream: IO[str] | None = None, *, summary_s: float = 0.0
) -> int:
    """Run until SIGINT/SIGTERM. A signal during start-up (readiness or recovery waiting on
    the database) cuts the start at once: nothing was scheduling yet, so that is a stop in
    order (exit 0)."""
    sink = diagnostics_sink(stream, replica=config.owner, prefix="qlsched run:")
    try:
        check_listen(config.http_address())
    except CannotListen as exc:
        return fail("run", str(exc), 1)
    assert config.dsn
    await check_login(config.dsn)
    stop = trio.Event()
    controls: list[ClusterControl] = []
    failures: list[Exception] = []

    async def replica(done: trio.CancelScope) -> None:
        try:
            async with open_cluster_control(config, sink=sink) as control:
                controls.append(control)
                address = control.http_address
                _say(
                    f"replica {shown(config.owner)} started"
                    + (f" http://{address[0]}:{address[1]}" if address else "")
                )
                async with trio.open_nursery() as nursery:
                    if summary_s > 0:
                        nursery.start_soon(
                            _print_summaries, control, summary_s, name="qlsched.summaries"
                        )
                    await stop.wait()
                    nursery.cancel_scope.cancel()
        except Exception as exc:
            # Raised again outside the nursery, so the command maps it to one line.
            failures.append(exc)
        done.cancel()

    with route_library_logs(sink):
        async with trio.open_nursery() as nursery:

            def on_signal(signum: int) -> None:
                name = signal.Signals(signum).name
                if controls:
                    _say(f"{name}: stopping (deadline {config.stop_timeout_ms} ms)")
                    stop.set()
                else:
                    _say(f"{name}: stopping during start-up")
                    nursery.cancel_scope.cancel()

            await nursery.start(
                watch_signals, (signal.SIGINT, signal.SIGTERM), on_signal, name="qlsched.signals"
            )
            nursery.start_soon(replica, nursery.cancel_scope, name="qlsched.replica")
    if isinstance(sink, ReadableSink):
        sink.close()  # tell what was folded
    if failures:
        failure = failures[0]
        if isinstance(failure, SchemaNotReady):
            raise _short_not_ready(failure) from None
        address = config.http_address()
        if isinstance(failure, OSError) and address and failure.errno in _LISTEN_ERRORS:
            # The listener lost a race for its port after check_listen released it.
            return fail("run", str(_listen_error(*address, failure)), 1)
        raise failure
    if not controls:
        _say("stopped before it started")
        return 0
    stats = controls[0].statistics()
    if stats.lifecycle.cut_at_deadline:
        _say(
            f"stopped at the deadline after {stats.lifecycle.rounds} rounds; the round in"
            " flight was cut (its claims are left to expire)"
        )
        return STOPPED_AT_DEADLINE
    _say(f"stopped after {stats.lifecycle.rounds} rounds")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_database_options(p, role="runtime")
    add_config_options(p, *(name for name in FLAGS if name not in DATABASE_OPTIONS))
    p.add_argument(
        "--summary",
        metavar="SECONDS",
        help="print a one-line summary this often (default 10 on a terminal, 0 = off)",
    )


def main(args: argparse.Namespace) -> int:
    hold_mmap_threshold()  # a long-running process: its memory must not creep (allocator)
    try:
        config = load_config(
            file=args.config or os.environ.get("QLSCHED_CONFIG"), flags=given_flags(args)
        )
        summary_s = summary_interval(args.summary)
    except ConfigError as exc:
        return fail("run", str(exc), 2)
    stream: IO[str] | None = None
    if config.diagnostics:
        try:
            stream = open(config.diagnostics, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            return fail("run", f"diagnostics file {config.diagnostics}: {exc.strerror}", 2)
    try:
        if config.dsn:
            return run_command("run", lambda: run_replica(config, stream, summary_s=summary_s))

        async def local() -> int:
            runtime = await local_dsn("run", config.data_dir, config.pg_bindir, "qlsched_runtime")
            return await run_replica(
                msgspec.structs.replace(config, dsn=runtime), stream, summary_s=summary_s
            )

        return run_command("run", local)
    finally:
        if stream is not None:
            stream.close()
