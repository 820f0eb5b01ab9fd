"""``qlsched edge run --db PATH``: the Edge scheduler, one process per file.

The flags are checked before the file is opened or locked (exit 2 on a bad value); the
runtime itself is ``qlsched.edge.root``.
"""

from __future__ import annotations

import argparse
from typing import Any

from qlsched.allocator import hold_mmap_threshold
from qlsched.edge.root import EdgeRun, run_edge
from qlsched.edge.settings import (
    EDGE_CADENCE_MS,
    EDGE_CLAIM_BUDGET,
    EdgeSettings,
    bounds_help,
    parse_address,
)
from qlsched.summary import summary_interval


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("--db", help=db_help)
    p.add_argument(
        "--cadence-ms", type=int, help=bounds_help("cadence_ms", "round cadence", EDGE_CADENCE_MS)
    )
    p.add_argument(
        "--claim-budget",
        type=int,
        help=bounds_help("claim_budget", "rows per round", EDGE_CLAIM_BUDGET),
    )
    p.add_argument("--http", help="HOST:PORT for /healthz, /readyz, /metrics, /v1/schedules")
    p.add_argument("--owner", help="the name recorded on admitted Runs (default edge-HOST-PID)")
    p.add_argument("--diagnostics", help="file for diagnostic JSON lines (default stderr)")
    p.add_argument(
        "--summary",
        metavar="SECONDS",
        help="print a one-line summary this often (default 10 on a terminal, 0 = off)",
    )


def run(args: argparse.Namespace, db: str) -> int:
    hold_mmap_threshold()  # a long-running process: its memory must not creep (allocator)
    given: dict[str, Any] = {
        name: value
        for name in ("cadence_ms", "claim_budget", "owner")
        if (value := getattr(args, name)) is not None
    }
    return run_edge(
        EdgeRun(
            db=db,
            settings=EdgeSettings(**given),
            http=parse_address(args.http) if args.http else None,
            diagnostics=args.diagnostics,
            summary_s=summary_interval(args.summary),
        )
    )
