"""The idempotency key and the minted ids: a pure function of (trigger, revision,
scheduled_for), so a takeover computes the same key; ids are fresh, under the replica prefix."""

from __future__ import annotations

import itertools
import uuid

import pytest

from qlsched.core.keys import fire_request, idempotency_key, manual_key
from qlsched.core.outcomes import Fire
from tests.unit.test_fence_parts import CLAIM


def test_key_format() -> None:
    """Rule: ql3:cron:v1:<triggerId>:<triggerRevision>:<scheduledForMs>, no project."""
    assert idempotency_key("backup", 3, 1_767_225_600_000) == "ql3:cron:v1:backup:3:1767225600000"


def test_manual_key_format() -> None:
    """Rule: a trigger-now Run's key is ql3:manual:v1:<triggerId>:<triggerRevision>:<requestId>:
    the same for every replica that admits the request, distinct from every cron key."""
    request = uuid.UUID("0b6f7c2e-54a1-4c5e-9d0e-2f1a3b4c5d6e")
    key = manual_key("backup", 3, request)
    assert key == "ql3:manual:v1:backup:3:0b6f7c2e-54a1-4c5e-9d0e-2f1a3b4c5d6e"
    assert key == manual_key("backup", 3, uuid.UUID(str(request)))
    assert manual_key("backup", 3, uuid.uuid4()) != key
    assert not key.startswith("ql3:cron:")


def test_same_occurrence_same_key_new_ids() -> None:
    """Rule: two replicas deciding the same claim mint different Run/Attempt ids and the
    same key; the Fire's fields pass through unchanged."""
    fire = Fire(scheduled_for_ms=CLAIM.cursor_ms or 0, next_ms=10**13, coalesced=4)
    a, b = fire_request(CLAIM, fire), fire_request(CLAIM, fire)
    assert a.idempotency_key == b.idempotency_key == idempotency_key("t", 3, fire.scheduled_for_ms)
    assert len({a.run_id, a.attempt_id, b.run_id, b.attempt_id}) == 4
    assert all(isinstance(i, uuid.UUID) and i.version == 8 for i in (a.run_id, a.attempt_id))
    assert (a.scheduled_for_ms, a.next_ms, a.coalesced, a.claim) == (
        fire.scheduled_for_ms,
        10**13,
        4,
        CLAIM,
    )


def test_ids_of_one_replica_share_its_prefix_and_count_up_in_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule: ids minted for an owner start with that owner's four-byte prefix (so one
    replica's Runs sit together in the runs index and concurrent admits of different
    replicas do not lock each other's pages); 512 in a row count up from one random base
    (one admit's Runs share one or two leaf pages), each group from its own base (the next
    admit lands elsewhere in the stretch); all distinct, version 8 with the RFC variant;
    two owners get different prefixes; without an owner, a random version-4 UUID."""
    from qlsched.core import keys
    from qlsched.core.keys import new_id, replica_prefix

    monkeypatch.setattr(keys, "_counter", itertools.count())  # at a group's start
    monkeypatch.setattr(keys, "_group", (-1, 0))
    a = [new_id("replica-a") for _ in range(64 * 512)]
    b = new_id("replica-b")
    assert {x.bytes[:4] for x in a} == {replica_prefix("replica-a")}
    assert b.bytes[:4] == replica_prefix("replica-b") != replica_prefix("replica-a")
    assert all(x.version == 8 and x.variant == uuid.RFC_4122 for x in [*a, b])
    assert len(set(a)) == len(a)
    groups = [a[i : i + 512] for i in range(0, len(a), 512)]
    # Within a group, as PostgreSQL orders uuids (bytewise): each id is the next one.
    for group in groups:
        assert [x.bytes for x in group] == sorted(x.bytes for x in group)
        assert group[-1].int - group[0].int == 511
    # Across the groups every free bit above the place varies; the place's 9 bits repeat.
    varying = 0
    for group in groups:
        varying |= group[0].int ^ groups[0][0].int
    assert bin(varying).count("1") == 90 - 9
    assert varying >> 96 == 0
    assert new_id().version == 4


def test_the_count_fills_the_free_bits_in_order() -> None:
    """Rule: the 90 bits below the prefix, less the version and variant, hold the count,
    its low bits lowest: a carry out of the low 62 bits (or the next 12) still yields a
    larger id, and no count touches the prefix, version or variant."""
    from qlsched.core import keys

    ids = [
        uuid.UUID(int=keys._spread(n) | keys._VERSION_8)
        for n in (0, (1 << 62) - 1, 1 << 62, (1 << 74) - 1, 1 << 74, (1 << 90) - 1)
    ]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(x.version == 8 and x.variant == uuid.RFC_4122 for x in ids)
    top = keys._spread((1 << 90) - 1)
    assert top >> 96 == 0
    assert bin(top).count("1") == 90
