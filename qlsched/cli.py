"""The command line: ``python -m qlsched COMMAND`` (also the ``qlsched`` console script).

Each command lives in ``qlsched.commands.<name>`` (``demo`` and ``bench`` in the tools wing,
``qlsched.tools``) and is imported only when chosen, so ``qlsched next`` never loads asyncpg.
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

from qlsched.commands.edge_args import EDGE_HELP, add_edge_arguments
from qlsched.core.config import BOUNDS, FLAGS, flag_of
from qlsched.exception_groups import interrupted

COMMANDS: dict[str, str] = {
    "demo": "an embedded cluster of replicas, one crashed, verified exactly once",
    "init-db": "create the database, roles and schema (superuser DSN)",
    "migrate": "apply pending schema migrations",
    "check": "schema readiness report (exit 1 when not ready)",
    "publish": "publish projects, tasks and triggers from a TOML file (admin DSN)",
    "pause": "stop scheduling a trigger until it is resumed (admin DSN)",
    "resume": "schedule a paused trigger again, counting what fell inside (admin DSN)",
    "trigger": "ask for one Run of a trigger now (admin DSN)",
    "backfill": "ask for the Runs of a trigger's occurrences in a past range (admin DSN)",
    "run": "run one cluster-control replica (runtime DSN)",
    "status": "schedules, claims, lag, backlog and recent runs (observer DSN)",
    "next": "preview the next fire times of a cron expression",
    "bench": "the project's benchmark, with the same-run pgbench ceiling",
    "local": "start, stop or show the local database that commands without a DSN share",
    "edge": EDGE_HELP,
}

TOOLS: dict[str, str] = {
    "demo": "qlsched.tools.demo.command",
    "bench": "qlsched.tools.bench.command",
}
"""Commands whose module is in the tools wing rather than ``qlsched.commands``."""


DATABASE_OPTIONS = ("dsn", "pg_bindir", "data_dir")


def _add_config_options(p: argparse.ArgumentParser, *names: str, **help: str) -> None:
    """Flags for config options: the name, type and help come from ``core.config.FLAGS``
    (``help`` overrides a text where a command reads the option differently)."""
    for name in names:
        text = help.get(name, FLAGS[name])
        if name in BOUNDS:
            p.add_argument(flag_of(name), type=int, help=text)
        else:
            p.add_argument(flag_of(name), help=text)


def _add_database_options(p: argparse.ArgumentParser, *, role: str) -> None:
    _add_config_options(p, "dsn", dsn=f"PostgreSQL DSN ({role}); default: the local database")
    p.add_argument("--config", help="a TOML config file (also QLSCHED_CONFIG)")
    _add_config_options(p, "pg_bindir", "data_dir")


def _add_control_arguments(pause: argparse.ArgumentParser, resume: argparse.ArgumentParser) -> None:
    for p in (pause, resume):
        p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")
    pause.add_argument("--note", help="why (shown by status and /v1/schedules)")
    resume.add_argument(
        "--catch-up",
        choices=("skip", "fire_once"),
        default="skip",
        help="skip: count what fell inside the pause (default); fire_once: fire its latest",
    )
    for p in (pause, resume):
        p.add_argument("--actor", help="who acts, recorded beside the database role")
        _add_database_options(p, role="admin")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qlsched",
        description="A clustered cron scheduler on PostgreSQL: exactly one Run per occurrence.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    subs = {
        name: sub.add_parser(name, help=text, description=text) for name, text in COMMANDS.items()
    }

    p = subs["demo"]
    p.add_argument("--replicas", type=int, default=3, help="replica processes (default 3)")
    p.add_argument("--seconds", type=int, default=30, help="how long to run (default 30)")
    p.add_argument("--dsn", help="a superuser DSN to use instead of the embedded database")
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the embedded database")

    p = subs["init-db"]
    p.add_argument(
        "--dsn",
        help="superuser DSN (also QLSCHED_SUPERUSER_DSN, or the libpq PG* variables and"
        " .pgpass when PGHOST or PGSERVICE is set; default: the local database)",
    )
    p.add_argument("--database", default="qlsched", help="database to create (default qlsched)")
    p.add_argument(
        "--password-file",
        metavar="PATH",
        help="write generated passwords to PATH (mode 0600, .pgpass format), not to stdout",
    )
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the embedded database")
    p.add_argument("--data-dir", help="data directory of the local database (qlsched local)")

    _add_database_options(
        subs["migrate"],
        role="superuser or migration owner; also QLSCHED_SUPERUSER_DSN, or the libpq PG*"
        " variables and .pgpass when PGHOST or PGSERVICE is set",
    )
    _add_database_options(
        subs["check"],
        role="also QLSCHED_DSN, or the libpq PG* variables and .pgpass when PGHOST or"
        " PGSERVICE is set",
    )
    for name in ("migrate", "check"):
        _add_config_options(subs[name], "lease_ms", lease_ms="the lease readiness compares against")
    subs["check"].add_argument("--json", action="store_true", help="one JSON object")

    p = subs["publish"]
    p.add_argument("file", help="the publish file (TOML)")
    p.add_argument("--prune", action="store_true", help="disable triggers missing from the file")
    _add_database_options(p, role="admin")

    _add_control_arguments(subs["pause"], subs["resume"])

    for name in ("trigger", "backfill"):
        p = subs[name]
        p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")
        if name == "backfill":
            p.add_argument("--from", dest="start", required=True, help="ISO 8601 (UTC if bare)")
            p.add_argument("--to", dest="end", required=True, help="ISO 8601 (UTC if bare)")
            p.add_argument(
                "--max",
                type=int,
                default=10_000,
                help="refuse a range of more occurrences (default 10000, at most 1000000)",
            )
        p.add_argument("--note", help="why (kept with the request and shown by status)")
        p.add_argument("--actor", help="who, recorded beside the database role")
        _add_database_options(p, role="admin")

    p = subs["run"]
    _add_database_options(p, role="runtime")
    _add_config_options(p, *(name for name in FLAGS if name not in DATABASE_OPTIONS))
    p.add_argument(
        "--summary",
        metavar="SECONDS",
        help="print a one-line summary this often (default 10 on a terminal, 0 = off)",
    )

    p = subs["status"]
    _add_database_options(p, role="observer")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--all", action="store_true", help="every trigger (default: the first 1000)")

    p = subs["next"]
    p.add_argument("expression", metavar="EXPR", help="cron expression (5 or 6 fields, or @daily)")
    p.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
    p.add_argument("--from", dest="start", help="ISO 8601 instant (default now)")
    p.add_argument("-n", type=int, default=5, help="how many (default 5, at most 100000)")
    p.add_argument(
        "--dst-gap",
        default="shift",
        metavar="shift|skip",
        help="a fixed-hour time in a spring-forward gap: at the gap's end, or not that day",
    )
    p.add_argument(
        "--dst-fold",
        default="first",
        metavar="first|last|both",
        help="a fixed-hour time in a repeated hour: its first instant, its last, or both",
    )
    p.add_argument(
        "--jitter-ms",
        type=int,
        default=0,
        metavar="N",
        help="the trigger's jitter_ms: also print each occurrence's due time (needs --trigger)",
    )
    p.add_argument(
        "--trigger",
        metavar="P/T",
        help="the trigger (project/id) whose due times to show; the hash names it",
    )
    p.add_argument(
        "--revision",
        type=int,
        default=1,
        metavar="N",
        help="the trigger's revision (default 1; `status` shows it), part of the hash",
    )

    p = subs["local"]
    actions = p.add_subparsers(
        dest="action", metavar="ACTION", required=True, help="what to do with it"
    )
    for action, text in (
        ("start", "start the local database (started on first use anyway)"),
        ("stop", "stop it; nothing else ever does"),
        ("status", "whether it runs (exit 0) or not (exit 1)"),
        ("dsn", "print a DSN for ROLE that works from any process while it runs"),
    ):
        q = actions.add_parser(action, help=text, description=text)
        q.add_argument("--data-dir", help="its data directory (also QLSCHED_DATA_DIR)")
        q.add_argument("--pg-bindir", help="PostgreSQL server binaries to start it with")
        if action == "dsn":
            q.add_argument(
                "role", metavar="ROLE", help="admin, runtime, worker_ingress, observer, superuser"
            )

    p = subs["bench"]
    p.add_argument(
        "--triggers",
        type=int,
        default=10_000,
        help="triggers in the drain, ceiling and steady phases (default 10000)",
    )
    p.add_argument("--replicas", type=int, default=2, help="replica processes (default 2)")
    p.add_argument(
        "--seconds", type=int, default=20, help="length of the steady phase (default 20)"
    )
    p.add_argument("--dsn", help="superuser DSN (default: an embedded database)")
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the embedded database")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--edge", action="store_true", help="the Edge profile's figures beside the cluster's"
    )
    p.add_argument("--cluster-json", help="with --edge: the cluster figures from this bench JSON")
    p.add_argument("--no-cluster", action="store_true", help="with --edge: no cluster figures")
    p.add_argument(
        "--scale",
        action="store_true",
        help="also a 1,000,000-trigger burst and 100,000 triggers steady (several minutes)",
    )
    p.add_argument(
        "--plot", metavar="DIR", help="write charts (PNG) to DIR (needs the bench extra)"
    )
    p.add_argument(
        "--from-json", metavar="FILE", help="with --plot: chart a saved --json report, no run"
    )

    add_edge_arguments(subs["edge"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name = TOOLS.get(args.command) or "qlsched.commands." + args.command.replace("-", "_")
    try:
        module = importlib.import_module(name)
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
