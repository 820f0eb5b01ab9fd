"""``qlsched edge run`` as a real process: one scheduler per file (an OS lock naming the
holder's pid, released by the kernel when the process dies), publish and status beside it,
SIGTERM stops it cleanly, and it loads nothing of the PostgreSQL or cluster path."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.edge.support import (
    AUDIT_BAD_RUNS,
    env,
    publish_file,
    qlsched,
    read,
    start_run,
    wait_ready,
)

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
        time.sleep(2.5)
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
    "prometheus_client",
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
    end, has loaded no asyncpg, trio-asyncio, hypercorn, prometheus-client, nor anything of
    qlsched.postgres, qlsched.embedded, qlsched.cluster or the tools."""
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
    loaded = [
        m for m in report["modules"] if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert loaded == []
    assert "qlsched.sqlite.store" in report["modules"]
    assert read(db, "SELECT count(*) > 0 FROM runs") == [(1,)]


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
