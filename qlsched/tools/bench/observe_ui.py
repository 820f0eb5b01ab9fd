"""The dashboard's pages timed in the observe phase (the contract: each within 100 ms at a
million triggers and ten million Runs).

``qlsched ui`` runs as its own process on the bench database's observer DSN (read only,
loopback, no token), as an operator runs it; each page is fetched ``calls`` times from this
process, one at a time, after one untimed warm-up fetch (the pool's first connection). The
pages: the overview, the schedules list (the first page, pages at cursors spread over the
key space, a search that matches few rows), one schedule (its next occurrences, Runs,
timeline and audit log), the Runs list (all, one state, one trigger's 10M-Run history),
one Run, requests and audit.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from qlsched.tools import bench_data
from qlsched.tools.bench.scale_results import EndpointTiming

START_TIMEOUT_S: Final = 60.0
HISTORY_RUN: Final = "00000000-0000-4000-8000-000000000001"
"""The first Run of the costs phase's history (``bench_history_runs``)."""


def pages(triggers: int, calls: int) -> dict[str, list[str]]:
    """Page name -> the paths fetched for it (``calls`` of them)."""
    pick = random.Random(14).randrange
    some = [
        f"{bench_data.PROJECT}/{bench_data.trigger_id(pick(1, triggers + 1))}" for _ in range(calls)
    ]
    same = [[path] * calls for path in ("/", "/runs", "/runs?state=queued", "/requests", "/audit")]
    return {
        "overview": same[0],
        "schedules": ["/schedules"] + [f"/schedules?after={k}" for k in some[1:]],
        "schedules_search": ["/schedules?q=t00999"] * calls,
        "schedule": [f"/schedules/{k}" for k in some],
        "runs": same[1],
        "runs_state": same[2],
        "runs_trigger": [f"/runs?trigger={bench_data.PROJECT}/history"] * calls,
        "run": [f"/runs/{HISTORY_RUN}"] * calls,
        "requests": same[3],
        "audit": same[4],
    }


async def _started(process: trio.Process) -> str:
    """The dashboard's base URL, from its first line on stderr."""
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(START_TIMEOUT_S):
        while b"\n" not in seen:
            chunk = await process.stderr.receive_some(4096)
            if not chunk:
                break
            seen += chunk
    found = re.search(rb"qlsched ui: (http://[^/\s]+)/", seen)
    if found is None:
        raise RuntimeError(f"qlsched ui did not start: {seen.decode(errors='replace')[-500:]}")
    return found.group(1).decode()


async def time_dashboard(
    observer_dsn: str,
    triggers: int,
    calls: int,
    get_ms: Callable[[str], Awaitable[float]],
) -> dict[str, EndpointTiming]:
    """Each page's timing, fetched by ``get_ms`` (the observe phase's timed GET)."""
    from qlsched.tools.bench.observe import timing  # that module imports this one

    command = [sys.executable, "-m", "qlsched", "ui", "--dsn", observer_dsn]
    process = await trio.lowlevel.open_process(
        [*command, "--http", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = await _started(process)
        out: dict[str, EndpointTiming] = {}
        for name, paths in pages(triggers, calls).items():
            await get_ms(base + paths[0])  # untimed: first use of the statements
            out[name] = timing([await get_ms(base + p) for p in paths])
        return out
    finally:
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
