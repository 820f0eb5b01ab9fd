"""``qlsched edge SUBCOMMAND``: the Edge profile's commands, on one SQLite file.

Imports only ``qlsched.core`` and ``qlsched.sqlite`` (never the PostgreSQL adapter, the
cluster, asyncpg, trio-asyncio or hypercorn). Expected failures print one line and exit 1
(failed) or 2 (bad input), as every other command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from qlsched.core.config import ConfigError
from qlsched.core.control import ControlError
from qlsched.core.specs import SpecError
from qlsched.sqlite.errors import EdgeError

SUBCOMMANDS = {
    "publish": "publish a TOML file into the file",
    "run": "run the scheduler on the file",
    "status": "schedules and recent runs of the file",
    "pause": "stop scheduling a trigger until it is resumed",
    "resume": "schedule a paused trigger again, counting what fell inside",
    "trigger": "ask for one Run of a trigger now",
    "backfill": "ask for the Runs of a trigger's occurrences in a past range",
}
PRELOAD = tuple(f"qlsched.commands.edge.{name}" for name in SUBCOMMANDS)
"""The subcommands' modules, which ``add_arguments`` imports (and Trio with them): loaded
by ``qlsched.entry`` while a SIGINT is only noted, not raised into an import (a Ctrl-C
0.4 s after `edge status` started landed in Trio's import, then a second in its handling)."""
DB_HELP = (
    "the Edge database file (default: QLSCHED_EDGE_DB, else edge.sqlite3 under the user's"
    " data directory, /var/lib/qlsched as root)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands; each declares its own flags (``add_arguments`` of its module)."""
    sub = parser.add_subparsers(
        dest="edge_command",
        metavar="SUBCOMMAND",
        required=True,
        help="publish, run, status, pause, resume, trigger or backfill",
    )
    for name, text in SUBCOMMANDS.items():
        module = importlib.import_module("qlsched.commands.edge." + name)
        module.add_arguments(sub.add_parser(name, help=text, description=text), DB_HELP)


def default_db_path() -> str:
    """``QLSCHED_EDGE_DB``, else ``edge.sqlite3`` under ``/var/lib/qlsched`` as root, else
    under the user's XDG data directory (``~/.local/share/qlsched``)."""
    given = os.environ.get("QLSCHED_EDGE_DB")
    if given:
        return given
    if os.geteuid() == 0:
        return "/var/lib/qlsched/edge.sqlite3"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "qlsched" / "edge.sqlite3")


def fail(subcommand: str, message: str, code: int) -> int:
    print(f"qlsched edge {subcommand}: {message}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    name: str = args.edge_command
    module = importlib.import_module("qlsched.commands.edge." + name)
    db = args.db or default_db_path()
    try:
        code: int = module.run(args, db)
    except (SpecError, ConfigError, ControlError) as exc:
        return fail(name, str(exc), 2)
    except EdgeError as exc:
        return fail(name, str(exc), 1)
    return code
