"""A schedule's timeline, drawn on the server as SVG (no script, no image request).

One horizontal axis from the earliest Run shown to the last upcoming occurrence: a filled
mark per past Run at its ``scheduled_for`` (its class names its state, so the stylesheet
colours it), a hollow mark per upcoming occurrence, and a line at the database's now. The
template draws what this module places; every coordinate is computed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from qlsched.postgres.ui import RunLine

WIDTH: Final = 960
HEIGHT: Final = 64
PAD: Final = 16
AXIS_Y: Final = 32


class Mark(msgspec.Struct, frozen=True):
    x: float
    css: str
    label: str
    href: str | None = None


class Timeline(msgspec.Struct, frozen=True):
    width: int
    height: int
    axis_y: int
    left: int
    right: int
    now_x: float
    past: list[Mark]
    upcoming: list[Mark]
    start_ms: int
    end_ms: int


def timeline(
    runs: Sequence[RunLine], upcoming: Sequence[int], now_ms: int, *, label: str = ""
) -> Timeline:
    """Place ``runs`` (any order) and the ``upcoming`` occurrence times on one axis."""
    from qlsched.ui.render import iso

    times = [r.scheduled_for_ms for r in runs] + list(upcoming) + [now_ms]
    start, end = min(times), max(times)
    if end - start < 60_000:  # one point in time: a minute around it
        start, end = start - 30_000, end + 30_000
    span = end - start
    left, right = PAD, WIDTH - PAD

    def x(ms: int) -> float:
        return round(left + (ms - start) * (right - left) / span, 1)

    past = [
        Mark(
            x(r.scheduled_for_ms),
            f"run {r.state}",
            f"{iso(r.scheduled_for_ms)} {r.state}",
            f"/runs/{r.run_id}",
        )
        for r in runs
    ]
    ahead = [Mark(x(t), "next", f"{iso(t)} {label}".strip()) for t in upcoming]
    return Timeline(WIDTH, HEIGHT, AXIS_Y, left, right, x(now_ms), past, ahead, start, end)
