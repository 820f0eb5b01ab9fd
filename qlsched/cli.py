"""The command line: ``python -m qlsched COMMAND`` (also the ``qlsched`` console script).

Each command lives in ``qlsched.commands`` (the control commands in ``commands.control``, the
Edge's in ``commands.edge``), declares its own flags there and is imported only when chosen,
so ``qlsched next`` never loads asyncpg.
Every command returns an exit code; expected failures (bad config, unreachable database,
invalid file) print one line to stderr, never a traceback.
Exit codes: 0 ok, 1 failed or not ready, 2 bad input or configuration.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from qlsched.exception_groups import interrupted

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "qlsched.commands.demo",
        "an embedded cluster of replicas, one crashed, verified exactly once",
    ),
    "init-db": (
        "qlsched.commands.init_db",
        "create the database, roles and schema (superuser DSN)",
    ),
    "migrate": ("qlsched.commands.migrate", "apply pending schema migrations"),
    "check": ("qlsched.commands.check", "schema readiness report (exit 1 when not ready)"),
    "publish": (
        "qlsched.commands.publish",
        "publish projects, tasks and triggers from a TOML file (admin DSN)",
    ),
    "pause": (
        "qlsched.commands.control.pause",
        "stop scheduling a trigger until it is resumed (admin DSN)",
    ),
    "resume": (
        "qlsched.commands.control.resume",
        "schedule a paused trigger again, counting what fell inside (admin DSN)",
    ),
    "trigger": ("qlsched.commands.control.trigger", "ask for one Run of a trigger now (admin DSN)"),
    "backfill": (
        "qlsched.commands.control.backfill",
        "ask for the Runs of a trigger's occurrences in a past range (admin DSN)",
    ),
    "retention": (
        "qlsched.commands.retention",
        "how long finished Runs are kept: set DURATION|off, show (admin DSN)",
    ),
    "run": ("qlsched.commands.run", "run one cluster-control replica (runtime DSN)"),
    "status": (
        "qlsched.commands.status",
        "schedules, claims, lag, backlog and recent runs (observer DSN)",
    ),
    "work": (
        "qlsched.commands.work",
        "run queued Runs' commands as child processes (worker DSN)",
    ),
    "cancel": (
        "qlsched.commands.cancel",
        "cancel a Run: queued at once, running via its worker (admin DSN)",
    ),
    "runs": ("qlsched.commands.runs", "the latest Runs with their Attempts (observer DSN)"),
    "next": ("qlsched.commands.next", "preview the next fire times of a cron expression"),
    "bench": (
        "qlsched.commands.bench",
        "the project's benchmark, with the same-run pgbench ceiling",
    ),
    "local": (
        "qlsched.commands.local",
        "start, stop or show the local database that commands without a DSN share",
    ),
    "ui": (
        "qlsched.commands.ui",
        "the dashboard: schedules, runs, requests, audit and controls in a browser",
    ),
    "edge": (
        "qlsched.commands.edge",
        "the Edge profile: one SQLite file, no server (publish, run, status)",
    ),
}
"""Command -> (its module, its one-line help). The module declares the command's flags
(``add_arguments(parser)``) next to its code and runs it (``main(args)``)."""

ALL = "*"


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(only: str | None = ALL) -> argparse.ArgumentParser:
    """The parser: every command listed with its help; the flags of ``only`` (every
    command's with ``ALL``; none with None). Declaring a command's flags imports its
    module, so ``main`` asks for the chosen command's alone: ``qlsched next`` never loads
    asyncpg, and ``edge run`` nothing of the cluster."""
    parser = argparse.ArgumentParser(
        prog="qlsched",
        description="A clustered cron scheduler on PostgreSQL: exactly one Run per occurrence.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        if only in (ALL, name):
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(chosen_command(words)).parse_args(words)
    try:
        module = importlib.import_module(COMMANDS[args.command][0])
        code: int = module.main(args)
    except BaseException as exc:
        # Ctrl-C, also when Trio delivers it inside an exception group; else re-raised for
        # `_failed` (a broken pipe, an embedded error; anything else is raised again).
        if not interrupted(exc):
            return _failed(args.command, exc)
        print("qlsched: interrupted", file=sys.stderr)
        return 130
    return code


def _failed(command: str, exc: BaseException) -> int:
    """The exit code for what a command raised, or ``exc`` raised again (a bug)."""
    if isinstance(exc, BrokenPipeError):
        # The reader went away (`qlsched status | head`): not an error worth a traceback.
        # Point stdout at /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    # Whatever command needed the local server (demo, or no --dsn): one line, such as
    # "install qlsched[embedded]" when its binaries are missing. Looked up, not imported,
    # so `next` never loads the embedded module.
    embedded = sys.modules.get("qlsched.embedded")
    if embedded is None or not isinstance(exc, embedded.EmbeddedError):
        raise exc
    print(f"qlsched {command}: {exc}", file=sys.stderr)
    return 1
