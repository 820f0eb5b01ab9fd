"""The misfire decision: a pure, total function of (spec, cursor, now).

``now`` is the database time the claim was taken, never this process's clock. The decision
never replays a backlog: at most one Fire, whose ``scheduled_for`` is always the durable
cursor, so any replica that decides the same claim computes the same occurrence and key.

| state                     | decision                                            |
|---------------------------|-----------------------------------------------------|
| cursor is None            | Initialize(next = nxt(now))                         |
| now < due                 | NotDue                                              |
| now - due <= grace        | Fire(scheduled_for = cursor, next = nxt(now))       |
| late, policy ``skip``     | Skip(next = nxt(now))                               |
| late, policy ``fire_once``| Fire(scheduled_for = cursor, next = nxt(now))       |

``due`` is the cursor plus its jitter ``h`` (``core.jitter``; the cursor itself without
jitter), so the misfire grace is measured from the due time. With jitter, ``nxt(now)``
keeps the one occurrence that may be past but not yet due: the latest occurrence at or
before ``now``, when its own due time is after ``now``, stays the next cursor instead of
being passed over (jitter is below the shortest period, so every earlier one is due).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from qlsched.core.cron import CronSchedule, next_after
from qlsched.core.cron_count import count_between
from qlsched.core.jitter import Jitter
from qlsched.core.outcomes import Decision, Fire, Initialize, NotDue, Skip

MisfirePolicy = Literal["skip", "fire_once"]

MISFIRE_GRACE_MS_MAX = 86_400_000
MISFIRE_GRACE_MS_DEFAULT = 60_000


class TriggerSpec(msgspec.Struct, frozen=True):
    """What ``decide`` needs of a trigger revision; built once per revision and cached."""

    cron: CronSchedule
    misfire_policy: MisfirePolicy = "skip"
    misfire_grace_ms: int = MISFIRE_GRACE_MS_DEFAULT


def decide(
    spec: TriggerSpec, cursor_ms: int | None, now_ms: int, jitter: Jitter | None = None
) -> Decision:
    """Decide one claimed schedule row. Pure: same inputs, same decision.

    ``jitter`` names the trigger revision and its ``jitter_ms`` (None or 0: none)."""
    if cursor_ms is None:
        return Initialize(next_ms=next_after(spec.cron, now_ms))
    offset = jitter.offset_ms(cursor_ms) if jitter is not None else 0
    due_ms = cursor_ms + offset
    if now_ms < due_ms:
        return NotDue()
    # Common case: the first occurrence after the cursor is already in the future, so the
    # count is 0 and that occurrence is nxt(now): one cron step per decision. Otherwise the
    # passed-over occurrences are counted, not stepped through: a decision's cost must not
    # grow with how late it is (an every-second trigger a year late passes 31 million).
    nxt = next_after(spec.cron, cursor_ms)
    passed = 0
    if nxt <= now_ms:
        passed = count_between(spec.cron, cursor_ms, now_ms)
        nxt = next_after(spec.cron, now_ms)
        if jitter is not None and jitter.jitter_ms > 0:
            # At most one occurrence lies in (now - jitter, now]: kept if not yet due.
            last = next_after(spec.cron, max(cursor_ms, now_ms - jitter.jitter_ms))
            if last <= now_ms < last + jitter.offset_ms(last):
                nxt, passed = last, passed - 1
    if now_ms - due_ms <= spec.misfire_grace_ms or spec.misfire_policy == "fire_once":
        return Fire(
            scheduled_for_ms=cursor_ms, next_ms=nxt, coalesced=passed, jitter_offset_ms=offset
        )
    return Skip(next_ms=nxt, skipped=1 + passed)
