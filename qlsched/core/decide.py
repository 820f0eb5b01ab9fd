"""The misfire decision: a pure, total function of (spec, cursor, now).

``now`` is the database time the claim was taken, never this process's clock. The decision
never replays a backlog: at most one Fire, whose ``scheduled_for`` is always the durable
cursor, so any replica that decides the same claim computes the same occurrence and key.

| state                     | decision                                            |
|---------------------------|-----------------------------------------------------|
| cursor is None            | Initialize(next = nxt(now))                         |
| now < cursor              | NotDue                                              |
| now - cursor <= grace     | Fire(scheduled_for = cursor, next = nxt(now))       |
| late, policy ``skip``     | Skip(next = nxt(now))                               |
| late, policy ``fire_once``| Fire(scheduled_for = cursor, next = nxt(now))       |
"""

from __future__ import annotations

from typing import Literal

import msgspec

from qlsched.core.cron import CronSchedule, next_after
from qlsched.core.outcomes import Decision, Fire, Initialize, NotDue, Skip

MisfirePolicy = Literal["skip", "fire_once"]

MISFIRE_GRACE_MS_MAX = 86_400_000
MISFIRE_GRACE_MS_DEFAULT = 60_000

COUNT_CAP = 1_000_000
"""Counting passed-over occurrences stops here (an every-second trigger down for 11 days);
the counter then records the cap, which is still far from silent."""


class TriggerSpec(msgspec.Struct, frozen=True):
    """What ``decide`` needs of a trigger revision; built once per revision and cached."""

    cron: CronSchedule
    misfire_policy: MisfirePolicy = "skip"
    misfire_grace_ms: int = MISFIRE_GRACE_MS_DEFAULT


def _passed_over(cron: CronSchedule, first_after_cursor: int, now_ms: int) -> tuple[int, int]:
    """Occurrences in ``(cursor, now]`` and the first occurrence after ``now``."""
    count = 0
    t = first_after_cursor
    while t <= now_ms and count < COUNT_CAP:
        count += 1
        t = next_after(cron, t)
    if t <= now_ms:  # cap reached: jump straight past now
        t = next_after(cron, now_ms)
    return count, t


def decide(spec: TriggerSpec, cursor_ms: int | None, now_ms: int) -> Decision:
    """Decide one claimed schedule row. Pure: same inputs, same decision."""
    if cursor_ms is None:
        return Initialize(next_ms=next_after(spec.cron, now_ms))
    if now_ms < cursor_ms:
        return NotDue()
    # Common case: the first occurrence after the cursor is already in the future, so the
    # count is 0 and that occurrence is nxt(now): one cron step per decision.
    passed, nxt = _passed_over(spec.cron, next_after(spec.cron, cursor_ms), now_ms)
    if now_ms - cursor_ms <= spec.misfire_grace_ms or spec.misfire_policy == "fire_once":
        return Fire(scheduled_for_ms=cursor_ms, next_ms=nxt, coalesced=passed)
    return Skip(next_ms=nxt, skipped=1 + passed)
