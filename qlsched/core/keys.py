"""Identity: the idempotency key and the Run/Attempt ids.

The key is a pure function of (trigger, revision, scheduled_for) and ``scheduled_for`` is
always the durable cursor, so a takeover replica computes the same key for the same
occurrence.

Ids are UUIDs (version 8: a layout of our own) whose first 32 bits name the replica that
mints them (a hash of its owner id) and whose other 90 free bits count up within the process
from a random start. Why: the attempts -> runs and run_events -> runs foreign keys make every
admit read the ``runs_pkey`` leaf pages its new Runs went into, and under SERIALIZABLE each
such read is a page-level predicate lock. Time-ordered ids put every replica on the one
rightmost page; fully random ids scatter every replica over every page, so concurrent admits
of different replicas land on each other's locked pages and retry. A prefix per replica
keeps each replica's Runs in its own stretch of the index, and counting within it keeps one
admit's Runs on one or two leaf pages: with random bits there, a 256-Run admit read about
one leaf page per Run, and past 32 pages of one index PostgreSQL replaces a transaction's
page locks with one lock on the whole index (``max_pred_locks_per_relation``), which every
other admit's inserts then conflict with (seen in every 2-replica burst; docs/performance.md).
A restarted replica starts counting elsewhere in its stretch: ids stay distinct (90 bits
from a random start) and no clock is read.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
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


_VERSION_8 = (0x8 << 76) | (0x2 << 62)
"""The version (8, a custom layout) and RFC 9562 variant bits of a UUID's integer."""
_LOW_62 = (1 << 62) - 1
_MID_12 = (1 << 12) - 1
_COUNTER_BITS = 90
_counter = itertools.count(secrets.randbits(_COUNTER_BITS - 1))
"""This process's ids, counted from a random start below half the range: never wraps."""


def replica_prefix(owner: str) -> bytes:
    """The four bytes a replica's ids start with: the same on every call for an owner."""
    return hashlib.sha256(owner.encode()).digest()[:4]


@functools.lru_cache(maxsize=256)
def _prefix_bits(owner: str) -> int:
    """``replica_prefix`` in place in a UUID's integer, hashed once per owner (two ids per
    admitted occurrence made the hash a measurable part of a replica's CPU in a burst)."""
    return int.from_bytes(replica_prefix(owner), "big") << 96


def _spread(n: int) -> int:
    """A 90-bit count in the free bits, in order (low 62, then 12 above the variant, then
    16 above the version): a larger count is a larger id."""
    return (n & _LOW_62) | (((n >> 62) & _MID_12) << 64) | ((n >> 74) << 80)


def new_id(owner: str | None = None) -> uuid.UUID:
    """With ``owner``: the owner's prefix, then this process's next count (version 8).
    Without: a random version-4 UUID."""
    if owner is None:
        return uuid.uuid4()
    return uuid.UUID(int=_prefix_bits(owner) | _spread(next(_counter)) | _VERSION_8)


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
