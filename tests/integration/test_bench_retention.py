"""``qlsched bench --retention-only --quick --json`` end to end, in a subprocess: the
retention phase alone (docs/contract.md §14). It must exit 0 and report, for the floor and
the large history, batches that each deleted exactly their Runs with their rows, and the
ratio of the two medians. No figure is compared with a goal here: speed is judged by the
bench against its own floor, never by a timed test on a shared machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_retention_phase_reports_exact_batches_against_its_floor() -> None:
    """Rule: the phase measures the same batch over a small and a large history in one run,
    each batch exact (500 Runs, 500 Attempts, 1,000 events; the queued Runs kept)."""
    argv = [sys.executable, "-m", "qlsched", "bench", "--retention-only", "--quick", "--json"]
    argv += ["--retention-history", "30000"]
    if dsn := os.environ.get("QLSCHED_TEST_DSN"):
        argv += ["--dsn", dsn]
    if bindir := os.environ.get("QLSCHED_TEST_PG_BINDIR"):
        argv += ["--pg-bindir", bindir]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = done.stdout.splitlines()
    report = json.loads(line)["retention"]
    assert report["batch_runs"] == 500
    assert (report["floor"]["history"], report["large"]["history"]) == (20_000, 30_000)
    for timing in (report["floor"], report["large"]):
        assert timing["exact"] is True
        assert timing["batches"] == 20
        assert 0 < timing["p50_ms"] <= timing["max_ms"]
    assert report["ratio"] == pytest.approx(report["large"]["p50_ms"] / report["floor"]["p50_ms"])


@pytest.mark.parametrize("value", ["10", "abc", "200000000"])
def test_a_bad_retention_history_is_one_line_and_exit_2(value: str) -> None:
    """Rule: --retention-history outside 20,000..100,000,000 is refused before anything
    starts (one line, exit 2)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "qlsched",
            "bench",
            "--retention-only",
            "--retention-history",
            value,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--retention-history" in done.stderr
    assert "Traceback" not in done.stderr
