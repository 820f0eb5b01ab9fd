"""``qlsched run``: one cluster-control replica until SIGINT or SIGTERM, then stop in order.

Config is validated before anything connects (exit 2 on a bad value). Without a DSN the
replica runs on the embedded database in a persistent data directory (a development mode:
one replica, the database stopped with it). On SIGINT/SIGTERM: withdraw admission, drain
the scheduler within ``stop_timeout_ms``, close the pools; exit 0 after a clean stop.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import IO

import msgspec
import trio

from qlsched.cluster.root import open_cluster_control
from qlsched.commands._common import embedded_database, fail, run_command
from qlsched.core.config import Config, ConfigError, load_config
from qlsched.core.diagnostics import DiagnosticSink
from qlsched.postgres.initdb import init_db

FLAGS = (
    "dsn",
    "owner",
    "claim_budget",
    "lease_ms",
    "cadence_ms",
    "stop_timeout_ms",
    "http",
    "diagnostics",
    "data_dir",
    "pg_bindir",
)


async def run_replica(config: Config, stream: IO[str] | None = None) -> int:
    sink = DiagnosticSink(stream, replica=config.owner)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_cluster_control(config, sink=sink) as control:
            where = (
                f" http://{control.http_address[0]}:{control.http_address[1]}"
                if (control.http_address)
                else ""
            )
            print(
                f"qlsched run: replica {config.owner} started{where}", file=sys.stderr, flush=True
            )
            async for signum in signals:
                print(
                    f"qlsched run: {signal.Signals(signum).name}: stopping "
                    f"(deadline {config.stop_timeout_ms} ms)",
                    file=sys.stderr,
                    flush=True,
                )
                break
    stats = control.statistics()
    print(
        f"qlsched run: stopped after {stats.lifecycle.rounds} rounds", file=sys.stderr, flush=True
    )
    return 0


def main(args: argparse.Namespace) -> int:
    flags = {name: getattr(args, name, None) for name in FLAGS}
    try:
        config = load_config(file=args.config or os.environ.get("QLSCHED_CONFIG"), flags=flags)
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
            return run_command("run", lambda: run_replica(config, stream))
        print("qlsched run: no --dsn, using the embedded database", file=sys.stderr)
        with embedded_database(config.data_dir, config.pg_bindir) as server:

            async def embedded() -> int:
                report = await init_db(server.dsn(), want_passwords=False)
                runtime = next(r.dsn for r in report.roles if r.role == "qlsched_runtime")
                return await run_replica(msgspec.structs.replace(config, dsn=runtime), stream)

            return run_command("run", embedded)
    finally:
        if stream is not None:
            stream.close()
