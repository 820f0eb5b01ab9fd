"""``qlsched retention set DURATION|off`` and ``qlsched retention show``: how long finished
Runs are kept (docs/contract.md §14).

``set`` needs the admin DSN; the value is checked before anything connects (``30d``,
``12h``, ``90m``, ``1d12h``; ``off`` or ``none`` keeps every Run; a bad value is one line,
exit 2). ``show`` reads with the admin or the observer DSN: the retention, the horizon it
puts now by the database's clock, who set it, and what it has deleted so far. Replicas
delete the finished Runs past the horizon; workers and replicas read the setting and
cannot change it.
"""

from __future__ import annotations

import argparse

from qlsched.admin._session import as_admin, as_reader
from qlsched.commands._common import run_command
from qlsched.commands.control.common import admin_dsn
from qlsched.commands.options import add_database_options
from qlsched.commands.tables import iso
from qlsched.core.control import ACTOR_MAX_CHARS, checked_text
from qlsched.core.retention import (
    PrunedTotals,
    RetentionSetting,
    format_retention,
    parse_retention,
)
from qlsched.postgres.pool import Connection
from qlsched.postgres.retention import read_setting, read_totals, set_retention


def setting_line(setting: RetentionSetting) -> str:
    """What the retention is and what it means now, in one line."""
    if setting.retention_ms is None or setting.horizon_ms is None:
        line = "retention off: every finished Run is kept"
    else:
        line = (
            f"retention {setting.text}: finished Runs that ended before"
            f" {iso(setting.horizon_ms)} (database time) are deleted"
        )
    if setting.updated_at_ms is not None:
        line += f" (set by {setting.updated_by} at {iso(setting.updated_at_ms)})"
    return line


def pruned_line(totals: PrunedTotals) -> str:
    return (
        f"deleted so far: {totals.runs:,} runs, {totals.attempts:,} attempts,"
        f" {totals.events:,} events, {totals.marks:,} recovery marks"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(
        dest="action", metavar="ACTION", required=True, help="set it, or show it"
    )
    set_p = actions.add_parser(
        "set",
        help="keep finished Runs this long (admin DSN)",
        description="keep finished Runs this long: 30d, 12h, 90m, 1d12h, or off (admin DSN)",
    )
    set_p.add_argument("duration", metavar="DURATION", help="30d, 12h, 90m, 1d12h, or off")
    set_p.add_argument("--actor", help="who sets it, recorded instead of the database role")
    add_database_options(set_p, role="admin")
    show_p = actions.add_parser(
        "show",
        help="the retention, its horizon now, and what it deleted (admin or observer DSN)",
        description="the retention, its horizon now, and what it deleted",
    )
    add_database_options(show_p, role="admin or observer")


def main(args: argparse.Namespace) -> int:
    command = f"retention {args.action}"
    if args.action == "set":
        return run_command(command, lambda: _set(command, args))
    return run_command(command, lambda: _show(command, args))


async def _set(command: str, args: argparse.Namespace) -> int:
    ms = parse_retention(args.duration)  # bad input fails before any database is touched
    actor = checked_text(args.actor, what="actor", max_chars=ACTOR_MAX_CHARS)
    dsn = await admin_dsn(command, args)

    async def fn(conn: Connection) -> RetentionSetting:
        await set_retention(conn, ms, actor=actor)
        return await read_setting(conn)

    setting = await as_admin(dsn, command, fn)
    print(setting_line(setting))
    if ms is not None:
        print(f"replicas delete them in batches from now on ({format_retention(ms)} kept)")
    return 0


async def _show(command: str, args: argparse.Namespace) -> int:
    dsn = await admin_dsn(command, args)

    async def fn(conn: Connection) -> tuple[RetentionSetting, PrunedTotals]:
        return await read_setting(conn), await read_totals(conn)

    setting, totals = await as_reader(dsn, command, fn)
    print(setting_line(setting))
    print(pruned_line(totals))
    return 0
