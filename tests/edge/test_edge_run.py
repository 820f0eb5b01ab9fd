"""``qlsched edge run`` as a real process: one scheduler per file (an OS lock naming the
holder's pid, released by the kernel when the process dies), publish and status beside it,
SIGTERM stops it cleanly, and it loads nothing of the PostgreSQL or cluster path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.edge.support import (
    AUDIT_BAD_RUNS,
    env,
    publish_file,
    qlsched,
    read,
    runs_of,
    start_run,
    wait_ready,
    wait_until,
)
from tests.support.exposition import profile_problems, qlsched_samples

pytestmark = pytest.mark.slow


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def test_one_run_per_file_and_publish_beside_it(tmp_path: Path) -> None:
    """A second ``edge run`` on the same file is refused at once (exit 1) naming the holder's
    pid; ``edge publish`` and ``edge status`` work while the run holds the file; the run
    admits Runs and SIGTERM ends it with exit 0."""
    db = tmp_path / "edge.sqlite3"
    assert (
        qlsched(
            "edge", "publish", str(publish_file(tmp_path / "a.toml", 2)), "--db", str(db)
        ).returncode
        == 0
    )
    holder = start_run(db, "--cadence-ms", "100")
    try:
        wait_ready(holder)
        started = time.monotonic()
        second = qlsched("edge", "run", "--db", str(db), timeout=30)
        assert time.monotonic() - started < 10
        assert second.returncode == 1
        assert f"(pid {holder.pid})" in second.stderr
        assert "Traceback" not in second.stderr

        more = qlsched(
            "edge", "publish", str(publish_file(tmp_path / "b.toml", 4)), "--db", str(db)
        )
        assert more.returncode == 0, more.stderr
        wait_until(runs_of(db, ("t000002", "t000003")), what="Runs of the new triggers")
        status = qlsched("edge", "status", "--db", str(db), "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["scheduler_pid"] == holder.pid
        assert report["runs_total"] > 0
        assert len(report["schedules"]) == 4
    finally:
        code = stop(holder)
    assert code == 0
    assert read(db, AUDIT_BAD_RUNS) == []
    assert {r[0] for r in read(db, "SELECT trigger_id FROM runs")} >= {"t000002", "t000003"}


@pytest.mark.parametrize("alias", ["symlink", "hardlink", "relative"])
def test_one_run_per_file_whatever_its_name(tmp_path: Path, alias: str) -> None:
    """The run lock names the file, not the path typed (issue #26 item 5): a second
    ``edge run`` through a symlink, a second hard link or a relative path to a file an
    ``edge run`` holds is refused (exit 1, naming the holder's pid), and ``edge status``
    through that other name reports the same holder."""
    db = tmp_path / "edge.sqlite3"
    assert (
        qlsched(
            "edge", "publish", str(publish_file(tmp_path / "a.toml", 1)), "--db", str(db)
        ).returncode
        == 0
    )
    other = tmp_path / "elsewhere" / "other.sqlite3"
    other.parent.mkdir()
    if alias == "symlink":
        other.symlink_to(db)
    elif alias == "hardlink":
        os.link(db, other)
    else:
        other = Path(os.path.relpath(db))
    holder = start_run(db, "--cadence-ms", "100")
    try:
        wait_ready(holder)
        second = start_run(other, "--cadence-ms", "100")
        try:
            _, err = second.communicate(timeout=30)
        finally:
            if second.poll() is None:  # a second scheduler started: the failure shown
                second.kill()
                second.communicate()
        assert second.returncode == 1, err
        assert f"(pid {holder.pid})" in err
        assert "one scheduler per file" in err
        assert "Traceback" not in err
        status = qlsched("edge", "status", "--db", str(other), "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["scheduler_pid"] == holder.pid
    finally:
        assert stop(holder) == 0
    # Released with its holder: the other name now starts a scheduler.
    again = start_run(other)
    try:
        wait_ready(again)
    finally:
        assert stop(again) == 0


def test_sigkill_leaves_no_lock(tmp_path: Path) -> None:
    """A SIGKILLed run leaves the file unlocked: the next run starts at once."""
    db = tmp_path / "edge.sqlite3"
    qlsched("edge", "publish", str(publish_file(tmp_path / "a.toml", 1)), "--db", str(db))
    first = start_run(db)
    wait_ready(first)
    assert stop(first, signal.SIGKILL) == -signal.SIGKILL

    again = start_run(db)
    try:
        wait_ready(again)
    finally:
        assert stop(again) == 0


PROBE = """
import json, os, signal, sys, threading
from qlsched.cli import main
threading.Timer(float(sys.argv[3]), lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
code = main(["edge", "run", "--db", sys.argv[1], "--cadence-ms", "50", *sys.argv[4:]])
with open(sys.argv[2], "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""
FORBIDDEN = (
    "asyncpg",
    "trio_asyncio",
    "hypercorn",
    "qlsched.postgres",
    "qlsched.embedded",
    "qlsched.cluster",
    "qlsched.fleet",
    "qlsched.bench",
    "qlsched.tools",
)


@pytest.mark.parametrize("http", [False, True], ids=["plain", "http"])
def test_edge_run_loads_no_cluster_code(tmp_path: Path, http: bool) -> None:
    """``edge run`` (with or without --http) in a fresh interpreter admits Runs and, at its
    end, has loaded no asyncpg, trio-asyncio, hypercorn, nor anything of qlsched.postgres,
    qlsched.embedded, qlsched.cluster or the tools. Without --http it loads neither
    prometheus-client nor rich either (the metrics library only serves a /metrics, and the
    memory budget is measured without one); with --http it loads the shared metrics."""
    db = tmp_path / "edge.sqlite3"
    qlsched("edge", "publish", str(publish_file(tmp_path / "a.toml", 3)), "--db", str(db))
    out = tmp_path / "modules.json"
    extra = ["--http", "127.0.0.1:0"] if http else []

    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(db), str(out), "2.5", *extra],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["code"] == 0, result.stderr
    forbidden = FORBIDDEN if http else (*FORBIDDEN, "prometheus_client", "rich")
    loaded = [
        m for m in report["modules"] if any(m == f or m.startswith(f + ".") for f in forbidden)
    ]
    assert loaded == []
    assert ("qlsched.metrics" in report["modules"]) == http
    assert "qlsched.sqlite.store" in report["modules"]
    assert read(db, "SELECT count(*) > 0 FROM runs") == [(1,)]


def test_edge_run_labels_every_series_profile_edge(tmp_path: Path) -> None:
    """Rule: every sample of every qlsched family ``edge run --http`` serves on ``/metrics``
    carries ``profile="edge"``: the cluster's names, told apart by the label (no
    ``qlsched_edge_*`` family); ``target_info`` says it too."""
    db = tmp_path / "edge.sqlite3"
    qlsched("edge", "publish", str(publish_file(tmp_path / "a.toml", 2)), "--db", str(db))
    proc = start_run(db, "--cadence-ms", "100", "--http", "127.0.0.1:0")
    try:
        [address] = re.findall(r"http on (\S+)", wait_ready(proc))
        wait_until(runs_of(db, ("t000000", "t000001")), what="a Run of each trigger")
        assert qlsched("edge", "trigger", "edge/t000000", "--db", str(db)).returncode == 0
        done = "SELECT count(*) FROM control_requests WHERE state = 'done'"
        wait_until(lambda: read(db, done) == [(1,)], what="the trigger-now admitted")
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        assert stop(proc) == 0
    assert profile_problems(text, "edge") == []
    # The requests pass counts into the cluster's request families, by the same codes.
    assert 'qlsched_request_outcomes_total{code="request_admitted",profile="edge"} 1.0' in text
    assert 'qlsched_request_occurrences_total{profile="edge",result="admitted"} 1.0' in text
    names = {s.name for s in qlsched_samples(text)}
    assert {
        "qlsched_rounds_total",
        "qlsched_admits_total",
        "qlsched_outcomes_total",
        "qlsched_schedule_lag_seconds_bucket",
        "qlsched_due_backlog",
        "qlsched_runs_deadline_cancelled_total",
        "qlsched_runs_released_total",
    } <= names
    assert [n for n in names if n.startswith("qlsched_edge_")] == []
    assert 'target_info{profile="edge"} 1.0' in text


LAYERS = """
import importlib, json, pkgutil, sys
import qlsched.sqlite
for m in pkgutil.iter_modules(qlsched.sqlite.__path__):
    importlib.import_module("qlsched.sqlite." + m.name)
print(json.dumps(sorted(sys.modules)))
"""


def test_sqlite_package_sits_on_core_only() -> None:
    """Layering: every module of ``qlsched.sqlite`` imports only ``qlsched.core`` and the
    neutral file readers ``qlsched.migrations`` and ``qlsched.sql_blocks`` of the package,
    and the neutral ``qlsched.http_limits`` (no commands, no cli, nothing of the cluster
    path)."""
    result = subprocess.run(
        [sys.executable, "-c", LAYERS],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    ours = [m for m in json.loads(result.stdout) if m.startswith("qlsched.")]
    neutral = (
        "qlsched.core",
        "qlsched.sqlite",
        "qlsched.migrations",
        "qlsched.sql_blocks",
        "qlsched.http_limits",
    )
    assert all(m.startswith(neutral) for m in ours), ours


def test_edge_run_prints_the_summary_line(tmp_path: Path) -> None:
    """``edge run --summary SECONDS`` prints ``run``'s one-line summary (rounds, claims,
    admits, mean lag, admits since start) at that interval, from the shared engine's
    counters; a bad interval is one line and exit 2."""
    db = tmp_path / "edge.sqlite3"
    qlsched("edge", "publish", str(publish_file(tmp_path / "a.toml", 2)), "--db", str(db))
    proc = start_run(db, "--cadence-ms", "100", "--summary", "0.3")
    try:
        wait_ready(proc)
        assert proc.stderr is not None
        lines = []
        while len(lines) < 4:
            line = proc.stderr.readline()
            assert line, "edge run ended before its summaries"
            if "last 0.3s:" in line:
                lines.append(line)
    finally:
        assert stop(proc) == 0
    assert all("rounds" in line and "admitted since start" in line for line in lines)
    assert any(" 0 admitted since start" not in line for line in lines)
    bad = qlsched("edge", "run", "--db", str(db), "--summary", "soon")
    assert bad.returncode == 2
    assert "summary: expected seconds" in bad.stderr
