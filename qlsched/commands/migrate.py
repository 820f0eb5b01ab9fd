"""``qlsched migrate``: apply pending migrations (superuser, or a member of qlsched_owner).

The DSN's role is checked once first: any other role is named (exit 2) instead of failing
on the ledger's permissions halfway through. The DSN comes from ``--dsn``,
``QLSCHED_SUPERUSER_DSN`` or the libpq variables (see ``dsn.superuser_dsn``), so a
superuser password need not show in ``ps``; with none of them, the local database.
"""

from __future__ import annotations

import argparse
import os

from qlsched.commands._common import fail, run_command
from qlsched.commands._local import local_dsn
from qlsched.commands.options import add_config_options, add_database_options
from qlsched.postgres.dsn import SUPERUSER_DSN_ENV, superuser_dsn
from qlsched.postgres.login import OWNER, WrongRole, read_login
from qlsched.postgres.migrate import MigrateReport, migrate
from qlsched.postgres.pool import Connection, connect_once


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_database_options(
        p,
        role="superuser or migration owner; also QLSCHED_SUPERUSER_DSN, or the libpq PG*"
        " variables and .pgpass when PGHOST or PGSERVICE is set",
    )
    add_config_options(p, "lease_ms", lease_ms="the lease readiness compares against")


def main(args: argparse.Namespace) -> int:
    if args.dsn == "":
        return fail("migrate", "--dsn must not be empty (leave it out for the local database)", 2)
    given = superuser_dsn(args.dsn, os.environ)
    if given == "":
        return fail(
            "migrate", f"{SUPERUSER_DSN_ENV} must not be empty (unset it for the local database)", 2
        )

    async def body() -> int:
        async def fn(conn: Connection) -> MigrateReport:
            login = await read_login(conn, OWNER)
            if not login.member:  # a superuser is a member of every role
                raise WrongRole(
                    f"this DSN logs in as {login.login}; migrate needs a superuser "
                    f"or a member of {OWNER}"
                )
            return await migrate(conn)

        dsn = given or await local_dsn("migrate", args.data_dir, args.pg_bindir, "postgres")
        report = await connect_once(dsn, fn)
        for name in report.applied:
            print(f"migration {name}: applied")
        for name in report.already:
            print(f"migration {name}: already applied")
        return 0

    return run_command("migrate", body)
