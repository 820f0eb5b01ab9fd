"""``qlsched bench --edge``: the Edge profile's budget, measured on real ``edge run`` processes.

Phases, each on a fresh file in a scratch directory:

- **burst** at 1k, 10k and 100k triggers: every cursor set due at once (a yearly cron, so
  each is due exactly once), one ``edge run``
  admits them all; the 10k run gives the drain rate (occurrences per second from the
  replica's start to its last admission), the 1k and 100k runs the replica's RSS after the
  drain (``VmRSS``; budget 40 MB, flat within 10 % from 1k to 100k);
- **steady**: 10k triggers a minute (trigger ``i`` at second ``i % 60``), the p99 of
  ``created_at_ms - scheduled_for_ms`` over the occurrences due in the measured window;
- **steady under a flood**: the same again with ``edge run --http`` and 200 clients
  requesting its ``/metrics`` without pause (``edge_flood``): the lag must stay within
  250 ms of the idle phase's and nothing may be lost.

Every phase checks exactly once (no duplicate, every Run with one pristine Attempt and its
two events). The cluster's figures come from a ``qlsched bench --json`` report (run here
unless one is given), shown side by side. The runtime never imports this module.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.sqlite.database import open_checked, wall_clock_ms
from qlsched.sqlite.errors import EdgeError
from qlsched.sqlite.publish import publish
from qlsched.tools.bench.edge_flood import FLOOD_LAG_SLACK_MS, flooding
from qlsched.tools.bench.flood import CLIENTS as FLOOD_CLIENTS
from qlsched.tools.bench.flood import FloodCount
from qlsched.tools.bench.machine import proc_kib
from qlsched.tools.queries import tool_query

RSS_BUDGET_MB = 40.0
RSS_FLAT_RATIO = 1.10
START_TIMEOUT_S = 60.0


class EdgeBenchOptions(msgspec.Struct, frozen=True, kw_only=True):
    rss_triggers: tuple[int, int] = (1_000, 100_000)
    drain_triggers: int = 10_000
    steady_triggers: int = 10_000
    steady_seconds: int = 70
    claim_budget: int = 256
    cadence_ms: int = 1_000


QUICK = EdgeBenchOptions(
    rss_triggers=(200, 2_000), drain_triggers=1_000, steady_triggers=600, steady_seconds=8
)


class Burst(msgspec.Struct, frozen=True, kw_only=True):
    triggers: int
    admitted: int
    seconds_from_start: float
    """From the replica's readiness to its last admission."""
    occurrences_per_s: float | None
    rss_mb: float | None
    peak_mb: float | None
    duplicates: int
    malformed: int


class Steady(msgspec.Struct, frozen=True, kw_only=True):
    triggers: int
    seconds: int
    expected: int
    occurrences: int
    lost: int
    duplicates: int
    malformed: int
    lag_p50_ms: int | None
    lag_p99_ms: int | None
    lag_max_ms: int | None


class Flooded(msgspec.Struct, frozen=True, kw_only=True):
    """The steady phase under the flood, its answers, and the idle phase's p99 beside it."""

    steady: Steady
    http: FloodCount
    idle_p99_ms: int | None

    @classmethod
    def of(cls, run: tuple[Steady, FloodCount], idle: Steady) -> Flooded:
        return cls(steady=run[0], http=run[1], idle_p99_ms=idle.lag_p99_ms)

    @property
    def within_slack(self) -> bool | None:
        p99, idle = self.steady.lag_p99_ms, self.idle_p99_ms
        if p99 is None or idle is None:
            return None
        return p99 <= idle + FLOOD_LAG_SLACK_MS and self.steady.lost == 0

    def line(self) -> str:
        s, h = self.steady, self.http
        return (
            f"steady under {h.clients} clients on /metrics: {s.occurrences:,} of"
            f" {s.expected:,} occurrences, lost {s.lost}, p99 {s.lag_p99_ms} ms (idle"
            f" {self.idle_p99_ms} ms); answers {h.answered:,} ok, {h.busy:,} busy (503),"
            f" {h.errors:,} errors"
        )


class ClusterFigures(msgspec.Struct, frozen=True, kw_only=True):
    drain_triggers: int | None
    drain_occurrences_per_s: float | None
    steady_triggers: int | None
    steady_lag_p99_ms: float | None
    rss_mb: dict[str, float]
    source: str


class EdgeReport(msgspec.Struct, frozen=True, kw_only=True):
    sqlite_version: str
    python: str
    options: EdgeBenchOptions
    bursts: list[Burst]
    steady: Steady
    flooded: Flooded | None = None
    rss_ratio: float | None
    targets: dict[str, bool | None]
    exactly_once: bool
    cluster: ClusterFigures | None


def _publish(db: Path, crons: list[str], misfire: Literal["skip", "fire_once"]) -> None:
    spec = PublishFile(
        projects=[ProjectEntry(id="bench")],
        tasks=[TaskEntry(project="bench", id="job", command="true")],
        triggers=[
            TriggerEntry(project="bench", id=f"t{i:07d}", task="job", cron=cron, misfire=misfire)
            for i, cron in enumerate(crons)
        ],
    )
    database = open_checked(str(db), create=True, apply=True)
    try:
        publish(database.conn, spec, wall_clock_ms())
    finally:
        database.close()


def _scalar(db: Path, name: str, *args: Any) -> Any:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(tool_query(name), args).fetchone()
    finally:
        conn.close()


class _Replica:
    """One ``qlsched edge run`` process; its stderr goes to a file next to the database."""

    def __init__(self, db: Path, options: EdgeBenchOptions, *, http: str | None = None) -> None:
        self.log = db.with_suffix(".log")
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "qlsched",
                    "edge",
                    "run",
                    "--db",
                    str(db),
                    "--claim-budget",
                    str(options.claim_budget),
                    "--cadence-ms",
                    str(options.cadence_ms),
                    *(["--http", http] if http else []),
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while "scheduling" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"edge run did not start: {self.log.read_text()[-500:]}")
            time.sleep(0.01)
        self.ready_ms = wall_clock_ms()

    def memory_mb(self) -> tuple[float | None, float | None]:
        status = f"/proc/{self.proc.pid}/status"
        rss, peak = proc_kib(status, "VmRSS"), proc_kib(status, "VmHWM")
        return (None if rss is None else rss / 1024, None if peak is None else peak / 1024)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _burst(workdir: Path, n: int, options: EdgeBenchOptions) -> Burst:
    db = workdir / f"burst-{n}.sqlite3"
    # A yearly cron with its cursor in the past: each trigger is due exactly once now, and
    # its next occurrence is months away, so the drain is exactly ``n`` Runs.
    _publish(db, ["0 0 1 1 *"] * n, "fire_once")
    conn = sqlite3.connect(db)
    conn.execute(tool_query("edge_bench_make_due"), (wall_clock_ms() - 1_000,))
    conn.commit()
    conn.close()
    replica = _Replica(db, options)
    try:
        deadline = time.monotonic() + 120 + n / 200
        while _scalar(db, "edge_bench_runs_progress")[0] < n and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        rss, peak = replica.memory_mb()
    finally:
        replica.stop()
    count, _first, last = _scalar(db, "edge_bench_runs_span")
    seconds = max(0.001, (int(last or replica.ready_ms) - replica.ready_ms) / 1000)
    return Burst(
        triggers=n,
        admitted=int(count),
        seconds_from_start=round(seconds, 3),
        occurrences_per_s=round(count / seconds, 1) if count else None,
        rss_mb=None if rss is None else round(rss, 1),
        peak_mb=None if peak is None else round(peak, 1),
        duplicates=int(_scalar(db, "edge_bench_duplicates")[0]),
        malformed=int(_scalar(db, "edge_bench_malformed")[0]),
    )


def _percentile(values: list[int], fraction: float) -> int | None:
    if not values:
        return None
    """Nearest rank of already sorted values."""
    return values[max(0, math.ceil(len(values) * fraction) - 1)]


def _steady(
    workdir: Path,
    options: EdgeBenchOptions,
    *,
    http: str | None = None,
    flood: FloodCount | None = None,
) -> Steady:
    """The steady phase; with ``http`` (``HOST:PORT``), its replica serves HTTP there and
    ``flood``'s clients request its ``/metrics`` through the window, counted into it."""
    n = options.steady_triggers
    db = workdir / ("steady-http.sqlite3" if http else "steady.sqlite3")
    _publish(db, [f"{i % 60} * * * * *" for i in range(n)], "skip")
    replica = _Replica(db, options, http=http)
    try:
        while _scalar(db, "edge_bench_uninitialised")[0] > 0:
            time.sleep(0.05)
        start = (wall_clock_ms() // 1000 + 2) * 1000
        with flooding(http, flood):
            time.sleep(options.steady_seconds)
        end = (wall_clock_ms() // 1000 - 2) * 1000
    finally:
        replica.stop()
    per_second = [0] * 60
    for i in range(n):
        per_second[i % 60] += 1
    expected = sum(per_second[(s // 1000) % 60] for s in range(start, end, 1000))
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(tool_query("edge_bench_lags"), (start, end)).fetchall()
    finally:
        conn.close()
    lags = sorted(int(r[2]) for r in rows)
    distinct = len({(r[0], r[1]) for r in rows})
    return Steady(
        triggers=n,
        seconds=options.steady_seconds,
        expected=expected,
        occurrences=len(rows),
        lost=max(0, expected - distinct),
        duplicates=int(_scalar(db, "edge_bench_duplicates")[0]),
        malformed=int(_scalar(db, "edge_bench_malformed")[0]),
        lag_p50_ms=_percentile(lags, 0.50),
        lag_p99_ms=_percentile(lags, 0.99),
        lag_max_ms=lags[-1] if lags else None,
    )


def _steady_flooded(workdir: Path, options: EdgeBenchOptions) -> tuple[Steady, FloodCount]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    count = FloodCount(clients=FLOOD_CLIENTS)
    return _steady(workdir, options, http=f"127.0.0.1:{port}", flood=count), count


def cluster_figures(report: dict[str, Any], source: str) -> ClusterFigures:
    """The cluster's comparable figures from a ``qlsched bench --json`` report."""
    drain = report.get("drain") or {}
    steady = report.get("steady") or {}
    lag = steady.get("lag_ms") or {}
    return ClusterFigures(
        drain_triggers=drain.get("triggers"),
        drain_occurrences_per_s=drain.get("occurrences_per_s"),
        steady_triggers=steady.get("triggers"),
        steady_lag_p99_ms=lag.get("p99"),
        rss_mb={str(k): float(v) for k, v in (report.get("rss_mb") or {}).items()},
        source=source,
    )


def run_cluster_bench(quick: bool) -> ClusterFigures:
    """The cluster's bench in a child process (its own embedded PostgreSQL), as JSON."""
    args = [sys.executable, "-m", "qlsched", "bench", "--json"] + (["--quick"] if quick else [])
    done = subprocess.run(args, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise RuntimeError(f"the cluster bench failed (exit {done.returncode})")
    return cluster_figures(json.loads(done.stdout), "qlsched bench --json")


def run_edge_bench(
    workdir: Path,
    options: EdgeBenchOptions,
    *,
    cluster: Callable[[], ClusterFigures | None],
    progress: Callable[[str], None],
) -> EdgeReport:
    sizes = sorted({*options.rss_triggers, options.drain_triggers})
    bursts = []
    for n in sizes:
        progress(f"edge burst: {n:,} due triggers")
        bursts.append(_burst(workdir, n, options))
    progress(
        f"edge steady: {options.steady_triggers:,} triggers a minute, {options.steady_seconds} s"
    )
    steady = _steady(workdir, options)
    progress(f"edge steady again, {FLOOD_CLIENTS} clients on /metrics")
    flooded = Flooded.of(_steady_flooded(workdir, options), steady)
    by_n = {b.triggers: b for b in bursts}
    low, high = (by_n[n].rss_mb for n in options.rss_triggers)
    ratio = round(high / low, 3) if low and high else None
    exactly_once = all(
        b.duplicates == 0 and b.malformed == 0 and b.admitted == b.triggers for b in bursts
    ) and (steady.duplicates == 0 and steady.malformed == 0 and steady.lost == 0)
    targets: dict[str, bool | None] = {
        f"rss <= {RSS_BUDGET_MB:.0f} MB": None
        if low is None or high is None
        else max(low, high) <= RSS_BUDGET_MB,
        "rss flat within 10 %": None if ratio is None else ratio <= RSS_FLAT_RATIO,
        f"p99 lag under {FLOOD_CLIENTS} HTTP clients within {FLOOD_LAG_SLACK_MS} ms of idle": (
            flooded.within_slack
        ),
    }
    exactly_once = exactly_once and flooded.steady.lost == 0 and flooded.steady.duplicates == 0
    progress("cluster figures")
    return EdgeReport(
        sqlite_version=sqlite3.sqlite_version,
        python=sys.version.split()[0],
        options=options,
        bursts=bursts,
        steady=steady,
        flooded=flooded,
        rss_ratio=ratio,
        targets=targets,
        exactly_once=exactly_once,
        cluster=cluster(),
    )


def _fmt(value: float | int | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}"
    return f"{value:,}{unit}"


def render_edge(report: EdgeReport) -> str:
    """Edge and cluster figures side by side."""
    o, c = report.options, report.cluster
    by_n = {b.triggers: b for b in report.bursts}
    drain = by_n[o.drain_triggers]
    rows: list[tuple[str, str, str]] = []
    for n in o.rss_triggers:
        cluster_rss = None if c is None else c.rss_mb.get(str(n))
        rows.append(
            (
                f"replica RSS at {n:,} triggers",
                _fmt(by_n[n].rss_mb, " MB"),
                _fmt(cluster_rss, " MB"),
            )
        )
    ratio = "-" if report.rss_ratio is None else f"{report.rss_ratio:.3f}"
    rows.append(("RSS ratio, most / fewest triggers", ratio, "-"))
    rows.append(
        (
            f"burst drain, {o.drain_triggers:,} due (occurrences/s)",
            _fmt(drain.occurrences_per_s),
            "-"
            if c is None
            else f"{_fmt(c.drain_occurrences_per_s)} ({_fmt(c.drain_triggers)} due)",
        )
    )
    rows.append(
        (
            f"steady p99 lag, {o.steady_triggers:,} triggers a minute",
            _fmt(report.steady.lag_p99_ms, " ms"),
            "-"
            if c is None
            else f"{_fmt(c.steady_lag_p99_ms, ' ms')} ({_fmt(c.steady_triggers)} triggers)",
        )
    )
    width = max(len(r[0]) for r in rows)
    out = [
        f"qlsched bench --edge (SQLite {report.sqlite_version}, Python {report.python}; claim"
        f" budget {o.claim_budget}, cadence {o.cadence_ms} ms)",
        f"{'':{width}}  {'edge':>14}  cluster" + ("" if c is None else f" ({c.source})"),
    ]
    out += [f"{name:{width}}  {edge:>14}  {cluster}" for name, edge, cluster in rows]
    if report.flooded is not None:
        out.append(report.flooded.line())
    s = report.steady
    out.append(
        f"steady: {s.occurrences:,} of {s.expected:,} expected occurrences, lost {s.lost},"
        f" p50 {_fmt(s.lag_p50_ms, ' ms')}, max {_fmt(s.lag_max_ms, ' ms')}"
    )
    for b in report.bursts:
        out.append(
            f"burst {b.triggers:,}: {b.admitted:,} admitted in {b.seconds_from_start:.2f} s"
            f" ({_fmt(b.occurrences_per_s)}/s), peak RSS {_fmt(b.peak_mb, ' MB')}"
        )
    for goal, met in report.targets.items():
        out.append(f"target {goal}: {'met' if met else 'unknown' if met is None else 'MISSED'}")
    out.append(f"exactly once: {'yes' if report.exactly_once else 'NO'}")
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    """``qlsched bench --edge``. The cluster's figures come from ``--cluster-json FILE`` (a
    ``qlsched bench --json`` report), else from running that bench here; ``--no-cluster``
    skips them. Exit 0 when exactly once held, 1 when it did not or the bench failed."""
    options = QUICK if args.quick else EdgeBenchOptions()

    def cluster() -> ClusterFigures | None:
        if args.no_cluster:
            return None
        if args.cluster_json:
            with open(args.cluster_json, encoding="utf-8") as fh:
                return cluster_figures(json.load(fh), args.cluster_json)
        return run_cluster_bench(args.quick)

    def progress(text: str) -> None:
        print(f"qlsched bench --edge: {text}", file=sys.stderr, flush=True)

    try:
        with tempfile.TemporaryDirectory(prefix="qlsched-edge-bench-") as workdir:
            report = run_edge_bench(Path(workdir), options, cluster=cluster, progress=progress)
    except (OSError, ValueError, RuntimeError, EdgeError) as exc:
        print(f"qlsched bench --edge: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(render_edge(report))
    return 0 if report.exactly_once else 1
