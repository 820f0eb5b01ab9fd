"""The schedule page's SVG timeline: where marks go (``qlsched.ui.timeline``)."""

from __future__ import annotations

import uuid

from qlsched.postgres.ui import RunLine
from qlsched.ui.timeline import timeline

DAY = 86_400_000
NOW = 1_800_000_000_000


def run(at: int, state: str = "succeeded") -> RunLine:
    return RunLine(uuid.uuid4(), "p", "t", 1, at, "k", state, at, at, "r", at)


def test_now_is_centred_and_the_past_mirrors_the_upcoming_reach() -> None:
    """Rule: the axis reaches as far back as the upcoming occurrences reach ahead, now in
    the middle; a Run in that past is drawn left of now, an occurrence right of it, in
    time order; a Run older than the window is counted, not drawn."""
    upcoming = [NOW + d * DAY for d in range(1, 4)]
    line = timeline([run(NOW - DAY, "failed"), run(NOW - 300 * DAY)], upcoming, NOW)
    assert line.start_ms == NOW - 3 * DAY
    assert line.end_ms == NOW + 3 * DAY
    assert line.now_x == (line.left + line.right) / 2
    [past] = line.past
    assert line.left < past.x < line.now_x
    assert past.css == "run failed"
    xs = [m.x for m in line.upcoming]
    assert xs == sorted(xs)
    assert line.now_x < xs[0]
    assert xs[-1] == line.right
    assert line.older == 1


def test_without_upcoming_occurrences_the_runs_set_the_window() -> None:
    """Rule: with nothing upcoming the past Runs set the reach (at least a minute)."""
    line = timeline([run(NOW - 10_000)], [], NOW)
    assert line.start_ms == NOW - 30_000
    assert line.older == 0
    assert len(line.past) == 1
