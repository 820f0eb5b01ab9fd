"""``qlsched runs [P/T | P] [--state S] [--limit N] [--json]``: the latest Runs with their
Attempts (observer DSN): state, when it was scheduled, started and finished, and each
Attempt's worker, outcome and exit code. ``--json`` prints one object per line."""

from __future__ import annotations

import argparse
import datetime as dt
import os

import msgspec

from qlsched.admin.runs import list_runs
from qlsched.commands._common import run_command
from qlsched.commands._local import local_dsn
from qlsched.commands.options import add_database_options
from qlsched.core.work import RunView
from qlsched.postgres.login import OBSERVER
from qlsched.settings import load_config


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def run_lines(run: RunView) -> list[str]:
    took = "" if run.duration_ms is None else f" in {run.duration_ms} ms"
    cancel = " (cancel requested)" if run.cancel_requested and run.state == "running" else ""
    lines = [
        f"{run.run_id} {run.project_id}/{run.trigger_id} {run.state}{cancel}"
        f" for {_iso(run.scheduled_for_ms)}{took}"
    ]
    for a in run.attempts:
        exit_code = "" if a.exit_code is None else f" exit {a.exit_code}"
        why = "" if a.error is None else f" ({a.error})"
        lines.append(
            f"  attempt {a.attempt_no} {a.state}{exit_code}{why} by {a.worker_id or '-'}"
            f" {_iso(a.started_at_ms)}..{_iso(a.finished_at_ms)}"
        )
    return lines


def main(args: argparse.Namespace) -> int:
    async def body() -> int:
        config = load_config(
            file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
        )
        dsn = config.dsn or await local_dsn("runs", args.data_dir, args.pg_bindir, OBSERVER)
        runs = await list_runs(dsn, args.trigger, state=args.state, limit=args.limit)
        for run in runs:
            if args.json:
                print(msgspec.json.encode(run).decode())
            else:
                print("\n".join(run_lines(run)))
        if not runs and not args.json:
            print("no runs")
        return 0

    return run_command("runs", body)


def add_arguments(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("trigger", nargs="?", metavar="P/T", help="PROJECT/TRIGGER or PROJECT")
    runs.add_argument("--state", help="queued, running, succeeded, failed or cancelled")
    runs.add_argument("--limit", type=int, default=50, help="at most N runs (default 50)")
    runs.add_argument("--json", action="store_true", help="one JSON object per run")
    add_database_options(runs, role="observer")
