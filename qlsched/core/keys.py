"""Identity: the idempotency key and the Run/Attempt ids.

The key is a pure function of (trigger, revision, scheduled_for) and ``scheduled_for`` is
always the durable cursor, so a takeover replica computes the same key for the same
occurrence.

Ids are version-4 UUIDs whose first 32 bits name the replica that mints them (a hash of its
owner id) and whose other 90 free bits are random. Why: the attempts -> runs and run_events
-> runs foreign keys make every admit read the ``runs_pkey`` leaf pages its new Runs went
into, and under SERIALIZABLE that read is a page-level predicate lock. Time-ordered ids put
every replica on the rightmost page; fully random ids scatter every replica over every
page, so concurrent admits of different replicas keep landing on each other's locked pages
and retrying, more so the more replicas run. A prefix per replica keeps each replica's Runs
in its own stretch of the index (docs/performance.md).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import uuid

from qlsched.core.fence import Claim, FireRequest
from qlsched.core.outcomes import Fire

KEY_PREFIX = "ql3:cron:v1"
MANUAL_KEY_PREFIX = "ql3:manual:v1"


def idempotency_key(trigger_id: str, trigger_revision: int, scheduled_for_ms: int) -> str:
    return f"{KEY_PREFIX}:{trigger_id}:{trigger_revision}:{scheduled_for_ms}"


def manual_key(trigger_id: str, trigger_revision: int, request_id: uuid.UUID) -> str:
    """The key of a trigger-now Run: one per request, whoever admits it and however often
    it is tried (a takeover or a lost reply re-sends the same key, never a second Run)."""
    return f"{MANUAL_KEY_PREFIX}:{trigger_id}:{trigger_revision}:{request_id}"


_VERSION_4 = (0x4 << 76) | (0x2 << 62)
"""The version (4) and RFC 4122 variant bits of a UUID's integer."""
_FREE_96 = ((1 << 96) - 1) & ~((0xF << 76) | (0x3 << 62))
"""The low 96 bits less the version and variant bits: the 90 random bits."""


def replica_prefix(owner: str) -> bytes:
    """The four bytes a replica's ids start with: the same on every call for an owner."""
    return hashlib.sha256(owner.encode()).digest()[:4]


@functools.lru_cache(maxsize=256)
def _prefix_bits(owner: str) -> int:
    """``replica_prefix`` in place in a UUID's integer, hashed once per owner (two ids per
    admitted occurrence made the hash a measurable part of a replica's CPU in a burst)."""
    return int.from_bytes(replica_prefix(owner), "big") << 96


def new_id(owner: str | None = None) -> uuid.UUID:
    """A version-4 UUID; with ``owner``, its first four bytes are the owner's prefix."""
    if owner is None:
        return uuid.uuid4()
    return uuid.UUID(int=_prefix_bits(owner) | (secrets.randbits(96) & _FREE_96) | _VERSION_4)


def fire_request(claim: Claim, fire: Fire) -> FireRequest:
    """Mint the Run and Attempt identity for one Fire (and only for a Fire)."""
    return FireRequest(
        claim=claim,
        scheduled_for_ms=fire.scheduled_for_ms,
        next_ms=fire.next_ms,
        coalesced=fire.coalesced,
        run_id=new_id(claim.fence.owner),
        attempt_id=new_id(claim.fence.owner),
        idempotency_key=idempotency_key(
            claim.trigger_id, claim.trigger_revision, fire.scheduled_for_ms
        ),
        jitter_offset_ms=fire.jitter_offset_ms,
    )
