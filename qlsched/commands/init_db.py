"""``qlsched init-db``: database, roles, schema; prints one DSN per LOGIN role."""

from __future__ import annotations

import argparse

from qlsched.commands._common import run_command
from qlsched.commands._local import local_data_dir, open_local
from qlsched.postgres.initdb import InitReport, init_db


def print_report(report: InitReport) -> None:
    made = "created" if report.created_database else "exists"
    print(f"database {report.database}: {made}")
    for name in report.migrate.applied:
        print(f"migration {name}: applied")
    for name in report.migrate.already:
        print(f"migration {name}: already applied")
    for role in report.roles:
        note = "  (generated password: shown only now)" if role.generated else ""
        print(f"{role.role}: {role.dsn}{note}")


def main(args: argparse.Namespace) -> int:
    async def body(dsn: str) -> int:
        report = await init_db(dsn, database=args.database)
        print_report(report)
        return 0

    if args.dsn is not None:  # an empty --dsn is bad input (init_db says so), not "embedded"
        return run_command("init-db", lambda: body(args.dsn))

    async def local() -> int:
        server = await open_local("init-db", local_data_dir(args.data_dir), args.pg_bindir)
        return await body(server.dsn())

    return run_command("init-db", local)
