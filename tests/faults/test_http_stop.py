"""HTTP clients cannot hold a replica past its stop deadline (README "Stop"): a client that
pipelines requests and never reads a reply fills the replica's socket buffers, so the
replica's send blocks (hypercorn shields it from cancellation); SIGTERM must still end the
process within ``stop_timeout_ms`` + 1 s, the port released."""

from __future__ import annotations

import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from tests.integration.cluster_support import publish_triggers, trigger
from tests.integration.schema_support import clean_env
from tests.support.pg import TestDatabase

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_MS = 1000
BOUND_S = STOP_TIMEOUT_MS / 1000 + 1.0
"""The contract: gone within stop_timeout_ms + 1 s of SIGTERM."""
REQUEST = b"GET /v1/schedules HTTP/1.1\r\nHost: replica\r\n\r\n"


def _wait_started(process: subprocess.Popen[str]) -> int:
    assert process.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        seen += line
        m = re.search(r"started http://127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
        if not line:
            break
    raise AssertionError(f"the replica did not start:\n{seen}")


def _fill(port: int) -> socket.socket:
    """Connect, then pipeline requests without reading until the replica stops reading
    (no byte accepted for 1 s: its send to us is blocked); bounded by 30 s."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    client.setblocking(False)
    deadline = time.monotonic() + 30
    pending = REQUEST * 64
    while time.monotonic() < deadline:
        _, writable, _ = select.select([], [client], [], 1.0)
        if not writable:
            return client  # the replica has stopped reading: it is stuck sending
        try:
            sent = client.send(pending)
        except BlockingIOError:
            continue
        pending = pending[sent:] or REQUEST * 64
    raise AssertionError("the replica kept reading for 30 s")


def test_a_client_that_never_reads_cannot_hold_the_stop(pg_db: TestDatabase) -> None:
    """Rule: with a never-reading pipelining client connected (the replica blocked sending
    it /v1/schedules pages), SIGTERM ends ``run --http`` within stop_timeout_ms + 1 s."""
    trio.run(publish_triggers, pg_db, [trigger(f"t{i:04d}") for i in range(400)])
    process = subprocess.Popen(
        [sys.executable, "-m", "qlsched", "run", "--dsn", pg_db.runtime_dsn, "--http",
         "127.0.0.1:0", "--stop-timeout-ms", str(STOP_TIMEOUT_MS), "--summary", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=clean_env(None), cwd=REPO,
    )  # fmt: skip
    client: socket.socket | None = None
    try:
        port = _wait_started(process)
        client = _fill(port)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if client is not None:
            client.close()
        if process.stderr is not None:
            process.stderr.close()
    assert code is not None, "still running 30 s after SIGTERM"
    assert took <= BOUND_S, f"ended {took:.2f} s after SIGTERM (bound {BOUND_S} s)"
    assert code in (0, 3), code
