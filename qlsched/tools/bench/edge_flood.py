"""The Edge bench's HTTP flood (issue #31: a ``/metrics`` flood once took an ``edge run``'s
p99 lag from 9 to 662 ms): ``flood.CLIENTS`` clients requesting ``/metrics`` without pause
through the steady window, from a thread of the (synchronous) Edge bench, and the figure
it gives beside the idle phase's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

import msgspec
import trio

from qlsched.tools.bench.flood import FloodCount, flood

if TYPE_CHECKING:
    from qlsched.tools.bench.edge import Steady

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


class Flooded(msgspec.Struct, frozen=True, kw_only=True):
    """The steady phase under the flood, its answers, and the idle phase's p99 beside it."""

    steady: Steady
    http: FloodCount
    idle_p99_ms: int | None

    @classmethod
    def of(cls, run: tuple[Steady, FloodCount], idle: Steady) -> Flooded:
        return cls(steady=run[0], http=run[1], idle_p99_ms=idle.lag_p99_ms)

    @property
    def within_slack(self) -> bool | None:
        p99, idle = self.steady.lag_p99_ms, self.idle_p99_ms
        if p99 is None or idle is None:
            return None
        return p99 <= idle + FLOOD_LAG_SLACK_MS and self.steady.lost == 0

    def line(self) -> str:
        s, h = self.steady, self.http
        return (
            f"steady under {h.clients} clients on /metrics: {s.occurrences:,} of"
            f" {s.expected:,} occurrences, lost {s.lost}, p99 {s.lag_p99_ms} ms (idle"
            f" {self.idle_p99_ms} ms); answers {h.answered:,} ok, {h.busy:,} busy (503),"
            f" {h.errors:,} errors"
        )
