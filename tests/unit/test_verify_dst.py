"""The exactly-once verifier enumerates a trigger's occurrences with its DST policy, as the
replicas decide them, so a ``dst_fold = "both"`` trigger's second Run is expected, not
reported as unexpected."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from qlsched.tools.verify import _expected, _Schedule

NY = ZoneInfo("America/New_York")
FIRST = int(datetime(2026, 11, 1, 1, 30, tzinfo=NY).timestamp()) * 1000
SECOND = int(datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=NY).timestamp()) * 1000


@pytest.mark.parametrize(
    ("fold", "expected"), [("first", [FIRST]), ("last", [SECOND]), ("both", [FIRST, SECOND])]
)
def test_expected_occurrences_follow_the_policy(fold: str, expected: list[int]) -> None:
    """Rule: the verifier's expected occurrences on New York's fall-back day are the ones
    the trigger's ``dst_fold`` fires."""
    schedule = _Schedule(
        project_id="p",
        trigger_id="g",
        trigger_revision=1,
        active=True,
        next_fire_at_ms=None,
        last_scheduled_at_ms=None,
        skipped_total=0,
        coalesced_total=0,
        claim_version=1,
        cron="30 1 * * *",
        timezone=NY.key,
        misfire_policy="skip",
        misfire_grace_ms=60_000,
        dst_fold=fold,
    )
    assert _expected(schedule, FIRST - 3_600_000, SECOND + 60_000) == expected
