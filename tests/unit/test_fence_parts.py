"""``failed_part`` names the first fence part that no longer holds, in the order a fenced
WHERE lists them (revision, owner, token, version, expiry, state, cursor)."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from qlsched.core.fence import Claim, ClaimFence, ObservedSchedule, failed_part, refusal
from qlsched.core.outcomes import FenceLost, RevisionChanged

TOKEN = uuid.UUID(int=1)
NOW = 1_000_000
CLAIM = Claim(
    project_id="p",
    trigger_id="t",
    trigger_revision=3,
    state_version=7,
    fence=ClaimFence(owner="r1", token=TOKEN, version=5, expires_at_ms=NOW + 30_000),
    cursor_ms=NOW - 1_000,
    claimed_at_ms=NOW - 10,
    cron="* * * * *",
    timezone="UTC",
    misfire_policy="skip",
    misfire_grace_ms=60_000,
    trigger_digest="0" * 64,
    task_id="task",
    task_revision=1,
    execution_revision_id=uuid.UUID(int=2),
)
HELD = ObservedSchedule(
    trigger_revision=3,
    claim_owner="r1",
    claim_token=TOKEN,
    claim_version=5,
    claim_expires_at_ms=NOW + 30_000,
    state_version=7,
    next_fire_at_ms=NOW - 1_000,
)

# (case, changes to the observed row, expected outcome)
CASES: list[tuple[str, dict[str, Any], FenceLost | RevisionChanged | None]] = [
    ("every part holds", {}, None),
    ("new revision", {"trigger_revision": 4}, RevisionChanged("p", "t", part="trigger")),
    (
        "revision before owner",
        {"trigger_revision": 4, "claim_owner": "r2"},
        RevisionChanged("p", "t", part="trigger"),
    ),
    ("another owner", {"claim_owner": "r2"}, FenceLost("p", "t", part="owner")),
    (
        "claim cleared",
        {"claim_owner": None, "claim_token": None, "claim_expires_at_ms": None},
        FenceLost("p", "t", part="owner"),
    ),
    (
        "same owner, new token (ABA)",
        {"claim_token": uuid.UUID(int=9)},
        FenceLost("p", "t", part="token"),
    ),
    ("claim version moved", {"claim_version": 6}, FenceLost("p", "t", part="version")),
    ("expired at now", {"claim_expires_at_ms": NOW}, FenceLost("p", "t", part="expiry")),
    ("state version moved", {"state_version": 8}, FenceLost("p", "t", part="state")),
    ("cursor moved", {"next_fire_at_ms": NOW + 59_000}, RevisionChanged("p", "t", part="cursor")),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_failed_part(changes: dict[str, Any], expected: FenceLost | RevisionChanged | None) -> None:
    """Rule: the first part that fails, in WHERE order; None when all hold."""
    observed = msgspec.structs.replace(HELD, **changes)
    assert failed_part(CLAIM, observed, NOW, CLAIM.cursor_ms) == expected


def test_a_missing_row_and_an_unexplained_refusal() -> None:
    """Rule: a row that is gone is FenceLost(missing); a refused write whose observation
    shows nothing wrong changed in between: FenceLost(state)."""
    assert failed_part(CLAIM, None, NOW, CLAIM.cursor_ms) == FenceLost("p", "t", part="missing")
    assert refusal(CLAIM, HELD, NOW, CLAIM.cursor_ms) == FenceLost("p", "t", part="state")
