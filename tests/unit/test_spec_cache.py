"""The spec cache: one parse per distinct definition, never a spec of another definition."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from qlsched.core.cron import CronSchedule
from qlsched.core.decide import TriggerSpec
from qlsched.core.fence import Claim, ClaimFence
from qlsched.core.spec_cache import InvalidSpec, Lru, SpecCache, build_cron, build_spec

BASE = Claim(
    project_id="p",
    trigger_id="t",
    trigger_revision=1,
    state_version=1,
    fence=ClaimFence(owner="r", token=uuid.UUID(int=1), version=1, expires_at_ms=1),
    cursor_ms=None,
    claimed_at_ms=0,
    cron="0 2 * * *",
    timezone="America/New_York",
    misfire_policy="skip",
    misfire_grace_ms=60_000,
    trigger_digest="d",
    task_id="k",
    task_revision=1,
    execution_revision_id=uuid.UUID(int=2),
)

# One changed value per field the spec is built from.
VARIANTS = {
    "cron": "0 3 * * *",
    "timezone": "Europe/London",
    "misfire_policy": "fire_once",
    "misfire_grace_ms": 1,
    "dst_gap": "skip",
    "dst_fold": "both",
}


@pytest.mark.parametrize("field", sorted(VARIANTS))
def test_a_claim_differing_in_any_spec_field_gets_its_own_spec(field: str) -> None:
    """Claims that differ in a field the spec reads never share a cached spec (a shared one
    would decide a trigger by another trigger's cron, zone, policy or DST rule)."""
    cache = SpecCache(16)
    other = msgspec.structs.replace(BASE, **{field: VARIANTS[field]})
    assert cache.get(BASE) == build_spec(BASE)
    assert cache.get(other) == build_spec(other)
    assert cache.get(other) != cache.get(BASE)


def test_claims_of_one_definition_share_one_parse() -> None:
    """Two triggers (other ids, revisions, cursors) with one definition reuse one spec."""
    cache = SpecCache(16)
    first = cache.get(BASE)
    second = cache.get(
        msgspec.structs.replace(BASE, trigger_id="u", trigger_revision=7, cursor_ms=5)
    )
    assert isinstance(first, TriggerSpec)
    assert second is first


def test_an_unusable_definition_is_cached_as_invalid_with_its_reason() -> None:
    """A corrupt cron or zone, or a policy/grace out of range, is a value, not an exception."""
    assert build_spec(msgspec.structs.replace(BASE, cron="99 * * * *")) == InvalidSpec(
        exception="CronError"
    )
    bad_zone = build_cron("* * * * *", "Mars/Olympus", "shift", "first")
    assert isinstance(bad_zone, InvalidSpec)
    assert bad_zone.exception is not None
    assert build_spec(msgspec.structs.replace(BASE, misfire_policy="later")) == InvalidSpec(
        exception=None
    )
    assert build_spec(msgspec.structs.replace(BASE, misfire_grace_ms=-1)) == InvalidSpec(
        exception=None
    )
    assert isinstance(build_cron("* * * * *", "UTC", "shift", "first"), CronSchedule)


def test_the_lru_drops_the_least_recently_used_and_builds_each_key_once() -> None:
    """Size-bounded; a hit refreshes its key; a value is built only when missing."""
    built: list[str] = []

    def build(key: str) -> str:
        built.append(key)
        return key.upper()

    lru: Lru[str, str] = Lru(2)
    assert lru.get("a", lambda: build("a")) == "A"
    assert lru.get("b", lambda: build("b")) == "B"
    assert lru.get("a", lambda: build("a")) == "A"  # refreshes a
    assert lru.get("c", lambda: build("c")) == "C"  # drops b
    assert len(lru) == 2
    assert lru.get("a", lambda: build("a")) == "A"
    assert lru.get("b", lambda: build("b")) == "B"
    assert built == ["a", "b", "c", "b"]
