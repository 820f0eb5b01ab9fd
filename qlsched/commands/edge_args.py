"""The ``qlsched edge`` command line (argparse only: building the parser imports nothing)."""

from __future__ import annotations

import argparse

EDGE_HELP = "the Edge profile: one SQLite file, no server (publish, run, status)"
DB_HELP = (
    "the Edge database file (default: QLSCHED_EDGE_DB, else edge.sqlite3 under the user's"
    " data directory, /var/lib/qlsched as root)"
)


def add_edge_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(
        dest="edge_command", metavar="SUBCOMMAND", required=True, help="publish, run or status"
    )

    p = sub.add_parser(
        "publish", help="publish a TOML file into the file", description="publish a TOML file"
    )
    p.add_argument("file", help="the publish file (TOML), the cluster's format")
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--prune", action="store_true", help="disable triggers missing from the file")

    p = sub.add_parser(
        "run", help="run the scheduler on the file", description="run the Edge scheduler"
    )
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--cadence-ms", type=int, help="round cadence (10..600000, default 1000)")
    p.add_argument("--claim-budget", type=int, help="rows per round (1..256, default 256)")
    p.add_argument("--http", help="HOST:PORT for /healthz, /readyz, /metrics")
    p.add_argument("--owner", help="the name recorded on admitted Runs (default edge-HOST-PID)")
    p.add_argument("--diagnostics", help="file for diagnostic JSON lines (default stderr)")

    p = sub.add_parser(
        "status", help="schedules and recent runs of the file", description="Edge status"
    )
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--json", action="store_true", help="one JSON object")
