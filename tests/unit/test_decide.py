"""``decide()``, row by row of the misfire table (docs: cron and misfire rules), with the
grace bounds and the passed-over counts. One ``check`` helper; each case names its row."""

from __future__ import annotations

from typing import Literal

import pytest

from qlsched.core.cron import parse_cron
from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.outcomes import Decision, Fire, Initialize, NotDue, Skip

MIN = 60_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a minute boundary
EVERY_MINUTE = parse_cron("* * * * *")


def spec(policy: Literal["skip", "fire_once"] = "skip", grace_ms: int = MIN) -> TriggerSpec:
    return TriggerSpec(cron=EVERY_MINUTE, misfire_policy=policy, misfire_grace_ms=grace_ms)


# (row of the table, spec, cursor, now, expected decision)
CASES: list[tuple[str, TriggerSpec, int | None, int, Decision]] = [
    ("cursor NULL: initialise to nxt(now)", spec(), None, T0 + 10, Initialize(T0 + MIN)),
    ("cursor NULL on a tick: strictly after", spec(), None, T0, Initialize(T0 + MIN)),
    ("now < cursor: not due", spec(), T0, T0 - 1, NotDue()),
    ("now = cursor: fire, nothing passed", spec(), T0, T0, Fire(T0, T0 + MIN, 0)),
    ("inside grace: fire", spec(), T0, T0 + 30_000, Fire(T0, T0 + MIN, 0)),
    ("grace edge (now - c = g): fire", spec(), T0, T0 + MIN, Fire(T0, T0 + 2 * MIN, 1)),
    ("just past grace, skip: skip 2", spec(), T0, T0 + MIN + 1, Skip(T0 + 2 * MIN, 2)),
    ("late, skip: skip the cursor and 9", spec(), T0, T0 + 9 * MIN + 5, Skip(T0 + 10 * MIN, 10)),
    (
        "late, fire_once: one Fire, 9 coalesced",
        spec("fire_once"),
        T0,
        T0 + 9 * MIN + 5,
        Fire(T0, T0 + 10 * MIN, 9),
    ),
    ("grace 0, on time: fire", spec(grace_ms=0), T0, T0, Fire(T0, T0 + MIN, 0)),
    ("grace 0, 1 ms late: skip", spec(grace_ms=0), T0, T0 + 1, Skip(T0 + MIN, 1)),
    (
        "grace at its maximum (a day): fire",
        spec(grace_ms=86_400_000),
        T0,
        T0 + 86_400_000,
        Fire(T0, T0 + 86_400_000 + MIN, 1440),
    ),
    (
        "a year late, fire_once: exact count",
        spec("fire_once"),
        T0,
        T0 + 365 * 86_400_000,
        Fire(T0, T0 + 365 * 86_400_000 + MIN, 365 * 1440),
    ),
]


def check(s: TriggerSpec, cursor: int | None, now: int, expected: Decision) -> None:
    assert decide(s, cursor, now) == expected
    assert decide(s, cursor, now) == decide(s, cursor, now)  # pure


@pytest.mark.parametrize(
    ("s", "cursor", "now", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_misfire_table(s: TriggerSpec, cursor: int | None, now: int, expected: Decision) -> None:
    """Rule: each row of the misfire table: NULL cursor initialises, a cursor in the future
    is not due, within grace (inclusive) fires the cursor, past grace skips (counting the
    cursor and every occurrence passed) or, under fire_once, fires the cursor once and
    counts the rest as coalesced; the next cursor is always nxt(now)."""
    check(s, cursor, now, expected)


def test_a_fire_is_always_the_cursor_and_never_a_backlog() -> None:
    """Rule: whatever the lateness, at most one Fire, whose scheduled_for is the durable
    cursor (so a takeover computes the same occurrence and key)."""
    for late in (0, 1, MIN, 10 * MIN, 86_400_000):
        decision = decide(spec("fire_once"), T0, T0 + late)
        assert isinstance(decision, Fire)
        assert decision.scheduled_for_ms == T0
        assert decision.next_ms > T0 + late
