"""``qlsched status``: per trigger the next fire time, claim holder and lease left, lag,
skipped and coalesced counts; recent runs. Observer DSN; ``--json`` for scripts."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

import msgspec

from qlsched.commands._common import embedded_database, run_command
from qlsched.core.config import load_config
from qlsched.postgres.initdb import init_db
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.status import StatusReport, read_status


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def render(report: StatusReport) -> str:
    lines = [f"database time {_iso(report.now_ms)}   due backlog {report.due_backlog}"]
    header = (
        f"{'TRIGGER':32} {'CRON':18} {'NEXT FIRE (UTC)':25} {'LAG':>8} {'CLAIM':20} "
        f"{'LEASE':>7} {'SKIP':>5} {'COAL':>5}"
    )
    lines.append(header)
    for s in report.schedules:
        lag = "-"
        if s.next_fire_at_ms is not None and s.next_fire_at_ms <= s.now_ms and s.active:
            lag = f"{(s.now_ms - s.next_fire_at_ms) / 1000:.1f}s"
        lease = "-"
        if s.claim_expires_at_ms is not None:
            lease = f"{max(0, s.claim_expires_at_ms - s.now_ms) / 1000:.1f}s"
        name = f"{s.project_id}/{s.trigger_id}" + ("" if s.active else " (off)")
        lines.append(
            f"{name[:32]:32} {s.cron[:18]:18} {_iso(s.next_fire_at_ms):25} {lag:>8} "
            f"{(s.claim_owner or '-')[:20]:20} {lease:>7} {s.skipped_total:>5} "
            f"{s.coalesced_total:>5}"
        )
    lines.append("")
    lines.append("recent runs:")
    for r in report.recent_runs:
        lag = "-" if r.queued_at_ms is None else f"{r.queued_at_ms - r.scheduled_for_ms} ms"
        lines.append(
            f"  {r.project_id}/{r.trigger_id} for {_iso(r.scheduled_for_ms)} "
            f"{r.state} by {r.admitted_by_owner} (lag {lag})"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    async def body(dsn: str) -> int:
        async def fn(conn: Connection) -> StatusReport:
            return await read_status(conn)

        report = await connect_once(dsn, fn)
        if args.json:
            print(msgspec.json.encode(report).decode())
        else:
            print(render(report))
        return 0

    async def configured() -> int:
        config = load_config(
            file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
        )
        assert config.dsn
        return await body(config.dsn)

    if args.dsn is not None or os.environ.get("QLSCHED_DSN") is not None:
        # Given, even empty: configuration validates it (an empty DSN is bad input, exit 2),
        # never a silent fall-back to the embedded database.
        return run_command("status", configured)
    print("status: no --dsn, using the embedded database", file=sys.stderr)
    with embedded_database(args.data_dir, args.pg_bindir) as server:

        async def embedded() -> int:
            report = await init_db(server.dsn(), want_passwords=False)
            observer = next(r.dsn for r in report.roles if r.role == "qlsched_observer")
            return await body(observer)

        return run_command("status", embedded)
