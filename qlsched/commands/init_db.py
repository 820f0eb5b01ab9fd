"""``qlsched init-db``: database, roles, schema; prints one DSN per LOGIN role."""

from __future__ import annotations

import argparse
import sys

from qlsched.commands._common import embedded_database, run_command
from qlsched.postgres.dsn import redact
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
    print("init-db: no --dsn, using the embedded database", file=sys.stderr)
    with embedded_database(args.data_dir, args.pg_bindir) as server:
        print(f"embedded server: {redact(server.dsn())}", file=sys.stderr)
        return run_command("init-db", lambda: body(server.dsn()))
