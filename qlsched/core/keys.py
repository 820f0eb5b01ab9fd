"""Identity: the idempotency key and the Run/Attempt ids.

The key is a pure function of (trigger, revision, scheduled_for) and ``scheduled_for`` is
always the durable cursor, so a takeover replica computes the same key for the same
occurrence.

Ids are UUIDs (version 8: a layout of our own) whose first 32 bits name the replica that
mints them (a hash of its owner id); below that, each group of 512 ids in a row (a 256-Fire
admit's Runs and Attempts) counts up from a random base of its own. Why: the attempts ->
runs and run_events -> runs foreign keys make every admit read the ``runs_pkey`` leaf pages
its new Runs went into, and under SERIALIZABLE each such read is a page-level predicate
lock. Time-ordered ids put every replica on the one rightmost page; fully random ids
scatter every replica over every page, so concurrent admits of different replicas land on
each other's locked pages and retry. The prefix keeps each replica's Runs in its own
stretch of the index. Random bits below it made a 256-Run admit read about one leaf page
per Run, and past 32 pages of one index PostgreSQL replaces a transaction's page locks by
one lock on the whole index (``max_pred_locks_per_relation``), which every other admit's
inserts conflict with (seen in every 2-replica burst); a group's ids share one or two
pages. One count for the whole process instead (every admit at the end of the replica's
stretch) brought serialization failures back at 16 replicas, in every sweep measured; a
base per group puts each admit elsewhere in the stretch (docs/performance.md).
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
_GROUP_BITS = 9
"""512 ids in a row share a random base and count up below it: one 256-Fire admit's Runs
and Attempts."""
_counter = itertools.count()
_group: tuple[int, int] = (-1, 0)
"""The current group's number and base."""


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


def _next_count() -> int:
    """This process's next id below the prefix: a random base per group of 512, then the
    id's place in the group. Distinct: places differ within a group, and two groups share
    a base with odds of one in 2**81."""
    global _group
    n = next(_counter)
    number, base = _group
    if n >> _GROUP_BITS != number:
        number, base = n >> _GROUP_BITS, secrets.randbits(_COUNTER_BITS - _GROUP_BITS)
        _group = (number, base)
    return (base << _GROUP_BITS) | (n & ((1 << _GROUP_BITS) - 1))


def new_id(owner: str | None = None) -> uuid.UUID:
    """With ``owner``: the owner's prefix, then ``_next_count`` (version 8). Without: a
    random version-4 UUID."""
    if owner is None:
        return uuid.uuid4()
    return uuid.UUID(int=_prefix_bits(owner) | _spread(_next_count()) | _VERSION_8)


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
