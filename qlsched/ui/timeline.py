"""A schedule's timeline, drawn on the server as SVG (no script, no image request).

One horizontal axis centred on the database's now: as much past as the upcoming
occurrences reach into the future (a daily trigger's next ten days mirror its last ten), a
filled mark per Run in that past at its ``scheduled_for`` (its class names its state, so
the stylesheet colours it), a hollow mark per upcoming occurrence, a line at now. Runs older
than the window (a backfill of last year) are counted, not drawn, so they never squeeze the
rest into a corner. The template draws what this module places.
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
MIN_SPAN_MS: Final = 60_000


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
    older: int
    """Runs before the window: counted, not drawn."""


def timeline(
    runs: Sequence[RunLine], upcoming: Sequence[int], now_ms: int, *, label: str = ""
) -> Timeline:
    """Place ``runs`` (any order) within the window and the ``upcoming`` occurrences."""
    from qlsched.ui.render import iso

    ahead = max([*upcoming, now_ms]) - now_ms
    behind = ahead if ahead > 0 else now_ms - min([r.scheduled_for_ms for r in runs] + [now_ms])
    reach = max(ahead, behind, MIN_SPAN_MS // 2)
    start, end = now_ms - reach, now_ms + reach
    left, right = PAD, WIDTH - PAD

    def x(ms: int) -> float:
        return round(left + (ms - start) * (right - left) / (end - start), 1)

    shown = [r for r in runs if start <= r.scheduled_for_ms <= end]
    past = [
        Mark(
            x(r.scheduled_for_ms),
            f"run {r.state}",
            f"{iso(r.scheduled_for_ms)} {r.state}",
            f"/runs/{r.run_id}",
        )
        for r in shown
    ]
    marks = [Mark(x(t), "next", f"{iso(t)} {label}".strip()) for t in upcoming if t <= end]
    return Timeline(
        WIDTH,
        HEIGHT,
        AXIS_Y,
        left,
        right,
        x(now_ms),
        past,
        marks,
        start,
        end,
        len(runs) - len(shown),
    )
