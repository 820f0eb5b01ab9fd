"""The examples run as documented: the publish file publishes (twice, the second time as a
no-op), the embedded Trio service schedules and stops cleanly on SIGINT/SIGTERM, and the
dispatcher lists the queued Runs it left, as the read-only observer role."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.support.pg import TestDatabase, sql_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TRIGGERS = EXAMPLES / "triggers.toml"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qlsched", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _publish(db: TestDatabase) -> str:
    result = _cli("publish", str(TRIGGERS), "--dsn", db.admin_dsn)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _runs(db: TestDatabase) -> int:
    async def fn(conn: asyncpg.Connection[Any]) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM qlsched.runs"))

    return sql_run(db.observer_dsn, fn)


def _run_service(db: TestDatabase, seconds: float, signum: signal.Signals) -> str:
    """Run examples/embed_trio_service.py for ``seconds`` after it started, then signal it;
    return its output after asserting it stopped cleanly (exit 0) within a few seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
    env.update(
        QLSCHED_DSN=db.runtime_dsn,
        QLSCHED_OWNER="embedded-example",
        QLSCHED_CADENCE_MS="200",
        QLSCHED_STOP_TIMEOUT_MS="2000",
        PYTHONUNBUFFERED="1",
    )
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "embed_trio_service.py")],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = ""
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        if ready:
            first = proc.stdout.readline()
        assert "service: started" in first, first + proc.stdout.read()
        time.sleep(seconds)
        sent = time.monotonic()
        proc.send_signal(signum)
        rest, _ = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = first + rest
    assert proc.returncode == 0, out
    assert took < 2 + 5, f"stopping took {took:.1f} s"
    assert f"service: {signum.name}: stopping" in out
    assert "service: stopped after" in out
    return out


def test_triggers_example_publishes_twice(pg_db: TestDatabase) -> None:
    """Every trigger of the example is added; publishing it again changes nothing."""
    first = _publish(pg_db)
    assert "trigger demo/tick: added" in first
    assert "trigger demo/nightly-backup: added" in first
    assert first.count(": added") == 1 + 3 + 6  # project, tasks, triggers
    again = _publish(pg_db)
    assert ": added" not in again
    assert again.count(": unchanged") == 1 + 3 + 6


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_embedded_service_schedules_and_stops(pg_db: TestDatabase, signum: signal.Signals) -> None:
    """The Trio service runs a replica beside its own task; Runs are admitted; a signal
    stops it in order and it exits 0."""
    _publish(pg_db)
    out = _run_service(pg_db, 3.5, signum)
    assert "service: replica embedded-example:" in out  # its own task ran beside
    assert _runs(pg_db) >= 2


def test_dispatcher_lists_queued_runs(pg_db: TestDatabase) -> None:
    """As the observer, the dispatcher lists each queued Run once, with its pristine
    Attempt and the execution revision placement would hand to a worker (never the
    payload, which the observer may not read)."""
    _publish(pg_db)
    _run_service(pg_db, 3.5, signal.SIGINT)
    runs = _runs(pg_db)
    assert runs >= 2
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "dispatcher.py"), pg_db.observer_dsn, "--limit", "100"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("queued run ") == runs
    assert out.count(": pristine, remote_worker") == runs
    assert out.count("-> placement would offer this attempt") == runs
    assert "key ql3:cron:v1:tick:1:" in out
    assert "duplicate key" not in out
    assert f"{runs} queued runs listed" in out
