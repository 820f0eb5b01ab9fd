"""The local database: every command works with no DSN anywhere, side by side, against one
persistent embedded server (``qlsched local``), started on first use and attached to while
it runs; only ``local stop`` stops it.

Real processes throughout: each command is ``python -m qlsched`` in a subprocess, the data
directory a fresh one named by ``QLSCHED_DATA_DIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qlsched.embedded import open_embedded
from tests.integration.schema_support import clean_env, run_cli

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TRIGGERS = str(REPO / "examples" / "triggers.toml")


@pytest.fixture
def local_env() -> Iterator[dict[str, str]]:
    """An environment naming a fresh data directory (and the tests' binaries, if chosen);
    the local server is stopped at the end, whatever happened."""
    # Not tmp_path: pytest's base directory is 0700, which the server user cannot pass.
    parent = Path(tempfile.mkdtemp(prefix="qlsched-local-"))
    parent.chmod(0o755)
    extra = {"QLSCHED_DATA_DIR": str(parent / "pgdata")}
    bindir = os.environ.get("QLSCHED_TEST_PG_BINDIR")
    if bindir:
        extra["QLSCHED_PG_BINDIR"] = bindir
    env = clean_env(extra)
    try:
        yield env
    finally:
        run_cli(["local", "stop"], env=env, timeout=120)
        shutil.rmtree(parent)


def _postmaster_pid(env: dict[str, str]) -> int | None:
    pidfile = Path(env["QLSCHED_DATA_DIR"]) / "postmaster.pid"
    try:
        return int(pidfile.read_text().splitlines()[0])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _replica(env: dict[str, str], owner: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "qlsched", "run", "--owner", owner, "--cadence-ms", "200"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_the_first_day_with_no_dsn_anywhere(local_env: dict[str, str], tmp_path: Path) -> None:
    """Rule: with no DSN anywhere, `local start`, `publish`, two `run` replicas, a `work`
    worker (its jobs succeed, as `status` shows), `status` and `check` all work side by side
    on one local server (no "in use" error: they attach); SIGTERM stops the worker and the
    replicas in order (exit 0) and leaves the server running; `local stop` stops it."""
    started = run_cli(["local", "start"], env=local_env, timeout=180)
    assert started.returncode == 0, started.stderr
    pid = _postmaster_pid(local_env)
    assert pid is not None
    assert _alive(pid)
    again = run_cli(["local", "start"], env=local_env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    assert _postmaster_pid(local_env) == pid

    published = run_cli(["publish", TRIGGERS], env=local_env, timeout=60)
    assert published.returncode == 0, published.stderr
    assert "trigger demo/tick: added" in published.stdout

    replicas = [_replica(local_env, f"r{i}", tmp_path / f"r{i}.log") for i in (1, 2)]
    try:
        runs: list[dict[str, object]] = []
        deadline = time.monotonic() + 60
        while not runs:
            assert time.monotonic() < deadline, "no Run appeared in status within 60 s"
            for replica, i in zip(replicas, (1, 2), strict=True):
                assert replica.poll() is None, (tmp_path / f"r{i}.log").read_text()
            status = run_cli(["status", "--json"], env=local_env, timeout=60)
            assert status.returncode == 0, status.stderr
            runs = json.loads(status.stdout)["recent_runs"]
            time.sleep(0.5)
        assert {r["admitted_by_owner"] for r in runs} <= {"r1", "r2"}

        # The worker too, without a DSN: the local database's worker role runs the jobs.
        with open(tmp_path / "w.log", "wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "qlsched", "work", "--poll-ms", "100"],
                cwd=REPO,
                env=local_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            outcomes: set[object] = set()
            deadline = time.monotonic() + 60
            while "succeeded" not in outcomes:
                assert time.monotonic() < deadline, (tmp_path / "w.log").read_text()
                assert worker.poll() is None, (tmp_path / "w.log").read_text()
                status = run_cli(["status", "--json"], env=local_env, timeout=60)
                assert status.returncode == 0, status.stderr
                outcomes = {s["last_outcome"] for s in json.loads(status.stdout)["schedules"]}
                time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, (tmp_path / "w.log").read_text()

        check = run_cli(["check"], env=local_env, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stdout.startswith("ready: ")
    finally:
        for replica in replicas:
            replica.send_signal(signal.SIGTERM)
        codes = [replica.wait(30) for replica in replicas]
    assert codes == [0, 0], [(tmp_path / f"r{i}.log").read_text() for i in (1, 2)]
    assert _alive(pid), "a replica that stopped took the shared server with it"

    status = run_cli(["local", "status"], env=local_env, timeout=60)
    assert status.returncode == 0
    stopped = run_cli(["local", "stop"], env=local_env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert not _alive(pid)
    status = run_cli(["local", "status"], env=local_env, timeout=60)
    assert status.returncode == 1
    assert "not running" in status.stdout
    again = run_cli(["local", "stop"], env=local_env, timeout=60)
    assert again.returncode == 0
    assert "not running" in again.stdout


def test_local_dsn_works_from_another_process(local_env: dict[str, str]) -> None:
    """Rule: `local dsn ROLE` starts the server on first use and prints a DSN that another
    process can use after the printing one has exited (its socket outlives that command):
    `status --dsn` with the observer's DSN, and `publish --dsn` with the admin's."""
    observer = run_cli(["local", "dsn", "observer"], env=local_env, timeout=180)
    assert observer.returncode == 0, observer.stderr
    admin = run_cli(["local", "dsn", "admin"], env=local_env, timeout=60)
    assert admin.returncode == 0, admin.stderr
    assert admin.stdout.startswith("postgresql://qlsched_admin@")
    published = run_cli(["publish", TRIGGERS, "--dsn", admin.stdout.strip()], timeout=60)
    assert published.returncode == 0, published.stderr
    status = run_cli(["status", "--json", "--dsn", observer.stdout.strip()], timeout=60)
    assert status.returncode == 0, status.stderr
    assert len(json.loads(status.stdout)["schedules"]) == 6
    worker = run_cli(["local", "dsn", "worker"], env=local_env, timeout=60)
    assert worker.returncode == 0, worker.stderr
    assert worker.stdout.startswith("postgresql://qlsched_worker@")
    bad = run_cli(["local", "dsn", "nobody"], env=local_env, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith("qlsched local dsn: no role 'nobody'")


def test_commands_started_at_once_share_one_server(local_env: dict[str, str]) -> None:
    """Rule: two commands that both find no server start exactly one (the start lock):
    both succeed, and both see the same database afterwards."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "qlsched", *args],
            cwd=REPO,
            env=local_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in (["local", "start"], ["migrate"])
    ]
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert sum("started the local database" in out + err for out, err in results) == 1
    assert "already applied" in results[1][0]


def test_local_stop_leaves_a_server_another_process_owns(local_env: dict[str, str]) -> None:
    """Rule: `local stop` stops only the detached local server; a server a live process
    started for itself on that directory (it stops it when it ends) is refused, exit 1,
    and keeps running; commands still attach to it."""
    bindir = local_env.get("QLSCHED_PG_BINDIR")
    with open_embedded(local_env["QLSCHED_DATA_DIR"], bindir=bindir) as pg:
        stop = run_cli(["local", "stop"], env=local_env, timeout=60)
        assert stop.returncode == 1, stop.stdout + stop.stderr
        assert stop.stderr.startswith("qlsched local stop: ")
        assert "which stops it when it ends" in stop.stderr
        assert _alive(pg.pid)
        status = run_cli(["local", "status"], env=local_env, timeout=60)
        assert status.returncode == 0, status.stderr
