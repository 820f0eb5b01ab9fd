"""``qlsched migrate``: apply pending migrations (superuser, or a member of qlsched_owner)."""

from __future__ import annotations

import argparse

from qlsched.commands._common import fail, run_command
from qlsched.postgres.migrate import migrate
from qlsched.postgres.pool import connect_once


def main(args: argparse.Namespace) -> int:
    if not args.dsn:
        return fail("migrate", "--dsn is required (or use `qlsched init-db`)", 2)

    async def body() -> int:
        report = await connect_once(args.dsn, migrate)
        for name in report.applied:
            print(f"migration {name}: applied")
        for name in report.already:
            print(f"migration {name}: already applied")
        return 0

    return run_command("migrate", body)
