"""The Edge bench's HTTP flood (issue #31: a ``/metrics`` flood once took an ``edge run``'s
p99 lag from 9 to 662 ms): ``flood.CLIENTS`` clients requesting ``/metrics`` without pause
through the steady window, from a thread of the (synchronous) Edge bench, and the figure
the Edge bench reports beside the idle phase's (``edge.Flooded``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import trio

from qlsched.tools.bench.flood import FloodCount, flood

FLOOD_LAG_SLACK_MS: Final = 250
"""The p99 lag under the flood may exceed the idle phase's by at most this (the cluster's
target: cadence + 250 ms, and the Edge's idle p99 already includes its cadence)."""


@contextmanager
def flooding(http: str | None, count: FloodCount | None) -> Iterator[None]:
    """Flood ``http`` (``HOST:PORT``; None: nothing) from a thread until the block ends."""
    if http is None or count is None:
        yield
        return
    ready = threading.Event()
    held: list[tuple[trio.CancelScope, trio.lowlevel.TrioToken]] = []

    async def until_cancelled() -> None:
        with trio.CancelScope() as scope:
            held.append((scope, trio.lowlevel.current_trio_token()))
            ready.set()
            await flood(f"http://{http}", count, path="/metrics")

    thread = threading.Thread(target=trio.run, args=(until_cancelled,), daemon=True)
    thread.start()
    ready.wait(timeout=30)
    try:
        yield
    finally:
        if held:
            scope, token = held[0]
            trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(timeout=30)
