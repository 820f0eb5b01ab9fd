"""``qlsched run`` on a terminal (README "Configuration", ``diagnostics``): with stderr a
tty and no diagnostics file, each diagnostic is a readable ``qlsched run: HH:MM:SS LEVEL
CODE …`` line, never a JSON line, and repeats are folded; piped, they stay JSON lines."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from tests.integration.cluster_support import publish_triggers, trigger
from tests.integration.schema_support import clean_env, fetch
from tests.support.pg import TestDatabase

REPO = Path(__file__).resolve().parents[2]


def _read(fd: int, until: float) -> bytes:
    out = b""
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the pty closed (EIO): the process is gone
                break
            if not chunk:
                break
            out += chunk
    return out


def test_diagnostics_on_a_terminal_are_readable_lines(pg_db: TestDatabase) -> None:
    """Rule: a replica whose database refuses it (sessions cut, no new ones) writes, on a
    terminal, only ``qlsched run:`` lines: each diagnostic's level and code readable, the
    repeats folded into a count, no JSON line and no traceback."""
    trio.run(publish_triggers, pg_db, [trigger(f"t{i}", cron="* * * * * *") for i in range(3)])
    master, slave = pty.openpty()
    argv = ["run", "--dsn", pg_db.runtime_dsn, "--owner", "tty", "--cadence-ms", "100"]
    process = subprocess.Popen(
        [sys.executable, "-m", "qlsched", *argv, "--stop-timeout-ms", "2000", "--summary", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=clean_env(None),
        cwd=REPO,
    )
    os.close(slave)
    text = b""
    try:
        deadline = time.monotonic() + 60
        while b"started" not in text and time.monotonic() < deadline:
            text += _read(master, time.monotonic() + 0.5)
        assert b"started" in text, text
        # The database refuses new sessions and the replica's are cut: every round fails
        # (the outage of a stopped local database) until the stop.
        fetch(
            pg_db.cluster.dsn("postgres"), f'ALTER DATABASE "{pg_db.name}" ALLOW_CONNECTIONS false'
        )
        fetch(pg_db.cluster.dsn("postgres"), KILL_RUNTIME.format(db=pg_db.name))
        until = time.monotonic() + 30
        while not (READABLE.search(text.decode()) or b'"code"' in text):
            assert time.monotonic() < until, text
            text += _read(master, time.monotonic() + 0.25)
        # More failed rounds, folded: told on a different diagnostic or at the stop. The
        # replica backs off during an outage, so give it a few of its retries.
        text += _read(master, time.monotonic() + 5.0)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        text += _read(master, time.monotonic() + 1.0)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    lines = text.decode().splitlines()
    assert all(line.startswith("qlsched run: ") for line in lines), lines
    assert not any("{" in line for line in lines), lines
    assert any(READABLE.match(line) for line in lines), lines
    assert any(re.search(r"… \d+ more like it in the last \d+ s$", line) for line in lines), lines


READABLE = re.compile(r"qlsched run: \d\d:\d\d:\d\d (error|warning) [a-z_]+")
KILL_RUNTIME = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = '{db}' AND usename = 'qlsched_runtime'"
)
