"""``qlsched check``: the readiness report; exit 0 ready, 1 not ready.

The DSN comes from ``--dsn``, ``QLSCHED_DSN``, the config file, or (when ``PGHOST`` or
``PGSERVICE`` is set) the libpq variables and the password file; with none of them, the
local database.
"""

from __future__ import annotations

import argparse
import os

import msgspec

from qlsched.commands._common import run_command
from qlsched.commands._local import local_dsn
from qlsched.commands.options import add_config_options, add_database_options
from qlsched.core.shown import shown
from qlsched.postgres.dsn import libpq_dsn
from qlsched.postgres.health import RefusedTrigger, readable_refusals
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.readiness import Readiness, check_readiness
from qlsched.postgres.status import FailingRow, failing_rows
from qlsched.settings import load_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_database_options(
        p,
        role="also QLSCHED_DSN, or the libpq PG* variables and .pgpass when PGHOST or"
        " PGSERVICE is set",
    )
    add_config_options(p, "lease_ms", lease_ms="the lease readiness compares against")
    p.add_argument("--json", action="store_true", help="one JSON object")


def main(args: argparse.Namespace) -> int:
    config_file = args.config or os.environ.get("QLSCHED_CONFIG")

    async def body() -> int:
        config = load_config(file=config_file, flags={"dsn": args.dsn, "lease_ms": args.lease_ms})
        dsn = (
            config.dsn
            or libpq_dsn(os.environ)
            or await local_dsn("check", args.data_dir, args.pg_bindir, "postgres")
        )

        async def fn(
            conn: Connection,
        ) -> tuple[Readiness, list[RefusedTrigger], list[FailingRow]]:
            report = await check_readiness(conn, lease_ms=config.lease_ms)
            if not report.ready:
                return report, [], []
            return report, await readable_refusals(conn), await failing_rows(conn)

        report, refused, failing = await connect_once(dsn, fn)
        if args.json:
            doc = msgspec.to_builtins(report)
            doc["refused"] = msgspec.to_builtins(refused)
            doc["failing"] = msgspec.to_builtins(failing)
            print(msgspec.json.encode(doc).decode())
        else:
            for finding in report.findings:
                print(f"not ready: {shown(finding)}")
            if report.ready:
                print(
                    f"ready: PostgreSQL {report.server_version // 10000}, "
                    f"{len(report.applied)} migration(s) applied, grants exact"
                )
            for r in refused:
                print(
                    f"attention: cannot admit {r.project_id}/{r.trigger_id} until it is"
                    f" re-published: {shown(r.reason)}"
                )
            for f in failing:
                if f.stuck:
                    print(
                        f"attention: stuck {f.project_id}/{f.trigger_id}: {f.failures} admits"
                        f" failed in a row, last {f.last_failure}"
                    )
        return 0 if report.ready else 1

    return run_command("check", body)
