"""``qlsched bench --plot DIR`` (issue #20 item 8): four PNG charts from a bench report.

The charts are drawn from a small synthetic report (``--from-json``), so no bench runs
here; matplotlib is in the ``test`` extra, so this never skips. Without matplotlib,
``--plot`` says in one line how to install it and exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qlsched.commands.bench import plot_command
from qlsched.tools.bench import plot

PNG = b"\x89PNG\r\n\x1a\n"

REPORT = {
    "drain": {
        "triggers": 1000,
        "progress": {"seconds": [0.0, 0.1, 0.2], "admitted": [0, 400, 1000]},
    },
    "drain_same_tick": {
        "triggers": 1000,
        "progress": {"seconds": [0.0, 0.1, 0.3], "admitted": [0, 700, 1000]},
    },
    "steady": {"triggers": 1000, "lag_ms": {"p50": 50, "p95": 90, "p99": 120, "max": 200}},
    "claim_latency_us": {
        "1000": {
            "none_due": {"p50": 250.0, "p99": 600.0},
            "one_pct_due": {"p50": 800.0, "p99": 1500.0},
        },
        "1000000": {
            "none_due": {"p50": 260.0, "p99": 700.0},
            "one_pct_due": {"p50": 900.0, "p99": 1900.0},
        },
    },
    "rss": [{"triggers": 1000, "rss_mb": 45.0}, {"triggers": 1000000, "rss_mb": 46.0}],
    "scale": {
        "burst": {
            "triggers": 1000000,
            "progress": {"seconds": [0.0, 50.0, 100.0], "admitted": [0, 500000, 1000000]},
            "rss_samples": [
                {"admitted": 0, "rss_mb": [44.0, 44.5]},
                {"admitted": 500000, "rss_mb": [45.0, 45.5]},
            ],
        },
        "steady": {
            "triggers": 100000,
            "histogram": {"edges_ms": [0, 50, 100], "counts": [10, 80, 5]},
        },
    },
    "machine": {"cpu_count": 2},
}


def charts(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("report", [REPORT, {}], ids=["full", "empty"])
def test_plot_writes_the_four_charts_from_a_report(
    tmp_path: Path, report: dict[str, object]
) -> None:
    """Rule: ``--plot DIR --from-json FILE`` writes drain_progress, lag_distribution,
    claim_latency and rss as PNG files into DIR (created) and exits 0, from a full report
    and from one that lacks every figure (each chart then says what is missing)."""
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(report))
    out = tmp_path / "charts"

    assert plot_command(str(out), str(source)) == 0

    written = charts(out)
    assert sorted(written) == sorted(plot.CHARTS)
    assert all(body.startswith(PNG) and len(body) > 1000 for body in written.values())


def test_without_matplotlib_plot_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Rule: without matplotlib, ``--plot`` prints one line naming the ``bench`` extra and
    exits 2, before any bench runs; ``--from-json`` without ``--plot`` is bad input too."""
    monkeypatch.setattr(plot, "have_matplotlib", lambda: False)
    assert plot_command(str(tmp_path), None) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip install 'qlsched[bench]'" in err
    assert plot_command(None, str(tmp_path / "x.json")) == 2


def test_a_file_that_is_not_a_report_is_bad_input(tmp_path: Path) -> None:
    """Rule: ``--from-json`` of a missing file or of JSON that is not a bench report exits 2
    with one line, no traceback and no chart."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"drain": "fast"}))
    assert plot_command(str(tmp_path / "c"), str(bad)) == 2
    assert plot_command(str(tmp_path / "c"), str(tmp_path / "missing.json")) == 2
    assert not (tmp_path / "c").exists()
