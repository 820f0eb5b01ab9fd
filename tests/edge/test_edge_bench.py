"""``qlsched bench --edge`` (quick sizes): real ``edge run`` processes, exactly once held in
every phase, and the cluster's figures (from a ``qlsched bench --json`` report) beside the
Edge's in the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.edge.support import env

pytestmark = pytest.mark.slow

CLUSTER = {
    "drain": {"triggers": 10000, "occurrences_per_s": 3210.5},
    "steady": {"triggers": 10000, "lag_ms": {"p99": 87}},
    "rss_mb": {"1000": 61.5, "100000": 63.0},
}


def test_quick_edge_bench_beside_the_cluster(tmp_path: Path) -> None:
    """The quick Edge bench admits every burst exactly once, loses no steady occurrence
    (idle, and under a flood of /metrics requests), measures RSS, and shows the cluster
    report's drain rate and p99 lag beside its own."""
    report = tmp_path / "cluster.json"
    report.write_text(json.dumps(CLUSTER))
    args = [sys.executable, "-m", "qlsched", "bench", "--edge", "--quick"]

    as_json = subprocess.run(
        [*args, "--json", "--cluster-json", str(report)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
        check=False,
    )
    as_text = subprocess.run(
        [*args, "--no-cluster"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
        check=False,
    )

    assert as_json.returncode == 0, as_json.stderr
    edge = json.loads(as_json.stdout)
    assert edge["exactly_once"] is True
    assert all(b["admitted"] == b["triggers"] for b in edge["bursts"])
    assert edge["steady"]["lost"] == 0
    assert edge["steady"]["lag_p99_ms"] is not None
    assert all(b["rss_mb"] for b in edge["bursts"])
    assert edge["cluster"]["drain_occurrences_per_s"] == 3210.5
    assert edge["cluster"]["steady_lag_p99_ms"] == 87
    # The steady phase again under 200 HTTP clients on /metrics (issue #31): answered,
    # nothing lost, and the target named in the report.
    flooded = edge["flooded"]
    assert flooded["http"]["clients"] == 200
    assert flooded["http"]["answered"] > 0
    assert flooded["steady"]["lost"] == 0
    assert flooded["idle_p99_ms"] == edge["steady"]["lag_p99_ms"]
    assert any("200 HTTP clients" in goal for goal in edge["targets"])
    assert as_text.returncode == 0, as_text.stderr
    assert "burst drain, 1,000 due (occurrences/s)" in as_text.stdout
    assert "exactly once: yes" in as_text.stdout
    assert "steady under 200 clients on /metrics" in as_text.stdout
