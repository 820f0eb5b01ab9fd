"""What ``qlsched run`` writes to stderr while its database is down: codes, not tracebacks.

During an outage asyncpg's pool logs its failed reconnects with a traceback, through
logging's last-resort handler on stderr unless someone routes it. ``run`` routes the
library loggers into the diagnostic sink, so every stderr line is either one of the
command's own ``qlsched run:`` lines or a JSON diagnostic with a UTC timestamp and a level.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio_asyncio

from qlsched.embedded import open_embedded
from tests.support.faults import create_gate_db, every_second_triggers, publish_triggers

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
OUTAGE_S = 5.0
RUN = [sys.executable, "-m", "qlsched", "run"]
FLAGS = ["--lease-ms", "8000", "--stop-timeout-ms", "2000", "--cadence-ms", "200"]


async def _read_until(stream: trio.abc.ReceiveStream, text: bytearray, needle: bytes) -> None:
    while needle not in text:
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError(f"stderr closed before {needle!r}:\n{text.decode()}")
        text += chunk


async def test_an_outage_writes_diagnostics_not_tracebacks() -> None:
    """Rule: with the server stopped for a few seconds under a running replica, stderr
    holds no traceback and no library text: each line is a ``qlsched run:`` line or a JSON
    diagnostic with ``ts`` and ``level``; the replica then stops cleanly on SIGTERM."""
    with open_embedded() as server:
        async with trio_asyncio.open_loop():
            db = await create_gate_db(server, "outagelogs")
            await publish_triggers(db, every_second_triggers(2))
        process = await trio.lowlevel.open_process(
            [*RUN, "--dsn", db.runtime_dsn, "--owner", "o", *FLAGS],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert process.stderr is not None
        text = bytearray()
        try:
            with trio.fail_after(60):
                await _read_until(process.stderr, text, b"started")
                await trio.sleep(1)
                await trio.to_thread.run_sync(server.stop, "immediate")
                with trio.move_on_after(OUTAGE_S):
                    while chunk := await process.stderr.receive_some():
                        text += chunk
                await trio.to_thread.run_sync(server.start)
                await trio.sleep(2)
                process.send_signal(signal.SIGTERM)
                while chunk := await process.stderr.receive_some():
                    text += chunk
                returncode = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    out = text.decode()
    assert returncode == 0, out
    assert "Traceback" not in out
    diagnostics = []
    for line in out.splitlines():
        if line.startswith("qlsched run: "):
            continue
        record = json.loads(line)  # anything else fails here: library text, a traceback
        assert record["ts"].endswith("Z")
        assert record["level"] in ("error", "warning", "info")
        diagnostics.append(record["code"])
    assert "round_failed" in diagnostics, out
