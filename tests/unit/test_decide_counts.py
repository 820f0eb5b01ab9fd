"""Which counter a late occurrence lands in: the rule behind ``status``'s SKIP and COAL.

A ``skip``-policy trigger found late but within its misfire grace still fires its cursor's
occurrence; the occurrences between the cursor and now are passed over by that Fire and
count as *coalesced*, not skipped. Past the grace the policy applies: nothing fires and the
cursor's occurrence plus every one passed over count as *skipped*. (A replica restarted
after 20 s on an every-second trigger shows COAL 19 for a ``skip`` trigger: expected.)
"""

from __future__ import annotations

import pytest

from qlsched.core.cron import parse_cron
from qlsched.core.decide import MisfirePolicy, TriggerSpec, decide
from qlsched.core.outcomes import Decision, Fire, Skip

EVERY_SECOND = parse_cron("* * * * * *")
CURSOR = 1_700_000_000_000


def check(policy: MisfirePolicy, late_ms: int, expected: Decision) -> None:
    spec = TriggerSpec(cron=EVERY_SECOND, misfire_policy=policy, misfire_grace_ms=60_000)
    assert decide(spec, CURSOR, CURSOR + late_ms) == expected


@pytest.mark.parametrize(
    ("policy", "late_ms", "expected"),
    [
        # 19.5 s late, within the grace: either policy fires the cursor; 19 passed over.
        ("skip", 19_500, Fire(scheduled_for_ms=CURSOR, next_ms=CURSOR + 20_000, coalesced=19)),
        (
            "fire_once",
            19_500,
            Fire(scheduled_for_ms=CURSOR, next_ms=CURSOR + 20_000, coalesced=19),
        ),
        # 90.5 s late, past the grace: skip counts the cursor and the 90 after it as skipped;
        # fire_once still fires the cursor and counts the 90 as coalesced.
        ("skip", 90_500, Skip(next_ms=CURSOR + 91_000, skipped=91)),
        (
            "fire_once",
            90_500,
            Fire(scheduled_for_ms=CURSOR, next_ms=CURSOR + 91_000, coalesced=90),
        ),
        # On time: nothing passed over.
        ("skip", 300, Fire(scheduled_for_ms=CURSOR, next_ms=CURSOR + 1_000, coalesced=0)),
    ],
    ids=[
        "skip-within-grace",
        "fire-once-within-grace",
        "skip-past-grace",
        "fire-once-past-grace",
        "on-time",
    ],
)
def test_passed_over_occurrences_count_by_whether_a_fire_passed_them(
    policy: MisfirePolicy, late_ms: int, expected: Decision
) -> None:
    """Rule: occurrences a Fire passes over are coalesced, whatever the policy; only a Skip
    (policy ``skip``, past the grace) counts skipped, the cursor's occurrence included."""
    check(policy, late_ms, expected)
