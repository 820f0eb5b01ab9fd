"""``qlsched bench --quick --scale --json`` end to end, in a subprocess, as a newcomer runs it.

A smoke run: it must finish, exit 0, print exactly one JSON object carrying every key of the
report's contract (docs/contract.md §7), and hold exactly once in every replica phase (0 duplicates,
0 lost). No figure is compared with a goal here: speed is shown by the benchmark itself, never
asserted by a timed test on a shared machine.

The bench brings its own embedded PostgreSQL; with ``QLSCHED_TEST_DSN`` (a superuser DSN) it
runs in a fresh database on that server instead, and ``QLSCHED_TEST_PG_BINDIR`` selects the
binaries (pgbench included), as for the rest of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600
STATES = ("none_due", "one_pct_due", "most_due_claimed", "ten_pct_inactive", "ten_pct_paused")
QUICK_ROWS = ("1000", "10000")


def _command() -> list[str]:
    argv = [sys.executable, "-m", "qlsched", "bench", "--quick", "--scale", "--json"]
    if dsn := os.environ.get("QLSCHED_TEST_DSN"):
        argv += ["--dsn", dsn]
    if bindir := os.environ.get("QLSCHED_TEST_PG_BINDIR"):
        argv += ["--pg-bindir", bindir]
    return argv


def _env() -> dict[str, str]:
    """The test's environment without anything that would configure qlsched itself."""
    return {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}


def _drain_keys(drain: dict[str, Any]) -> None:
    for key in ("occurrences_per_s", "duplicates", "lost", "ssi_retry_ratio"):
        assert key in drain, key
    assert drain["duplicates"] == 0
    assert drain["lost"] == 0
    assert drain["admitted"] == drain["triggers"]


def test_quick_bench_prints_one_json_report_and_holds_exactly_once() -> None:
    """The quick bench exits 0 with one JSON object on stdout holding every contract key
    (machine, postgres_version, drain, drain_same_tick, steady, claim_latency_us, rss_mb,
    ceiling, and the costs: decision_cost with its exact passed-over count, recovery_cost
    having marked exactly the live candidates, readiness_cost ready; the batch ceiling, the
    replicas' CPU per occurrence, the publish phase, the observe phase's three reads with
    the bounded backlog, the drain's progress; the worker's no-op jobs per second at
    concurrency 1 and N, every job succeeded; with ``--scale`` the big burst, on the
    observe phase's triggers, and the big steady load, audited set-based; each phase's wall
    time), 0 duplicates and 0 lost in each drain and in steady; the steady phase again under
    200 HTTP clients on one replica's /healthz, exactly once."""
    proc = subprocess.run(
        _command(),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().count("\n") == 0, "stdout must be one JSON object alone"
    report = json.loads(proc.stdout)
    assert isinstance(report, dict)

    machine = report["machine"]
    for key in ("cpu_count", "cpu_model", "memory_mb"):
        assert key in machine, key
    assert isinstance(report["postgres_version"], str)

    _drain_keys(report["drain"])
    _drain_keys(report["drain_same_tick"])

    steady = report["steady"]
    assert set(steady["lag_ms"]) >= {"p50", "p95", "p99"}
    assert steady["duplicates"] == 0
    assert steady["lost"] == 0
    # The same steady load again under an HTTP flood of one replica (issue #31): measured
    # and exactly once; its answers are bounded by the request rate (qlsched.http_limits).
    flooded = report["steady_http"]
    assert flooded["http_clients"] == 200
    assert flooded["http_answered"] > 0
    assert (flooded["duplicates"], flooded["lost"]) == (0, 0)

    claims = report["claim_latency_us"]
    assert set(claims) == set(QUICK_ROWS)
    for rows in QUICK_ROWS:
        assert set(claims[rows]) == set(STATES)
        for latency in claims[rows].values():
            assert latency["p50"] > 0
            assert latency["p99"] >= latency["p50"]
            assert latency["k1_p99"] >= latency["k1_p50"] > 0
            assert latency["round_trip_p99"] >= latency["round_trip_p50"] > 0
            assert latency["plan"], "the claim's plan node types are reported"

    assert set(report["rss_mb"]) == set(QUICK_ROWS)
    assert all(mb > 0 for mb in report["rss_mb"].values())

    ceiling = report["ceiling"]
    assert ceiling["pair_occurrences_per_s"] > 0
    assert "ratio" in ceiling
    batch = ceiling["batch"]
    assert batch["occurrences_per_s"] > 0
    assert batch["admitted"] > 0
    assert batch["k"] == 256
    assert "drain_vs_batch_ceiling" in report["targets"]
    assert report["drain"]["replica_cpu_us_per_occurrence"] > 0
    publish = report["publish"]
    assert publish["added"] == publish["unchanged"] == publish["triggers"] > 0
    loaded = report["publish_under_load"]
    assert loaded["published"] == publish["triggers"]
    assert loaded["steady"]["duplicates"] == loaded["steady"]["lost"] == 0
    assert loaded["steady"]["occurrences"] > 0
    assert 0 < loaded["initialised"] <= loaded["published"]
    assert "publish_under_load" in report["targets"]
    punctual = report["on_time"]
    assert punctual["duplicates"] == punctual["lost"] == 0
    assert punctual["occurrences"] == punctual["expected_occurrences"] > 0
    assert punctual["cadence_ms"] == 1000
    assert "on_time" in report["targets"]

    worker = report["worker"]
    assert worker["concurrent"]["succeeded"] == worker["concurrent"]["jobs"] > 0
    assert worker["floor"]["succeeded"] == worker["floor"]["jobs"] > 0
    assert worker["concurrent"]["jobs_per_s"] > 0
    assert "ratio" in worker

    decision = report["decision_cost"]
    assert decision["exact"] is True
    assert decision["coalesced"] == decision["expected_coalesced"] == 365 * 86_400
    assert 0 < decision["p50_us"] <= decision["p99_us"]
    assert decision["round_worst_ms"] > 0
    recovery = report["recovery_cost"]
    assert recovery["terminal_attempts"] > 0
    assert recovery["marked"] == recovery["live_attempts"] // 2, "the live candidates"
    assert recovery["first_ms"] > 0
    assert report["readiness_cost"]["ready"] is True
    for key in ("decision_year_late", "decision_round", "recovery", "readiness"):
        assert key in report["targets"], key

    observe = report["observe"]
    for read in ("status", "metrics", "schedules"):
        assert 0 < observe[read]["p50_ms"] <= observe[read]["p99_ms"], read
        assert f"observe_{read}" in report["targets"], read
    assert observe["due_backlog"] == 1000, "every row due: the count stops at its limit"
    assert observe["due_backlog_capped"] is True
    progress = report["drain"]["progress"]
    assert progress["admitted"][-1] == report["drain"]["triggers"]

    big = report["scale"]
    for phase in (big["burst"], big["steady"]):
        assert phase["duplicates"] == phase["lost"] == phase["malformed"] == 0
    assert big["burst"]["admitted"] == big["burst"]["triggers"]
    assert "reused" in proc.stderr, "the big burst keeps the observe phase's triggers"
    assert list(report["phase_seconds"]) == [
        "burst",
        "ceiling",
        "same_tick",
        "worker",
        "steady",
        "steady_http",
        "on_time",
        "scale",
        "publish",
        "publish_load",
        "costs",
        "observe",
        "scale_burst",
        "scale_steady",
        "retention",
    ]
    assert report["exactly_once"] is True
    assert "qlsched bench" in proc.stderr, "progress lines go to stderr"
