"""Identity: the idempotency key and the Run/Attempt ids.

The key is a pure function of (trigger, revision, scheduled_for) and ``scheduled_for`` is
always the durable cursor, so a takeover replica computes the same key for the same
occurrence. Ids are random UUIDv4, not time-ordered: with the attempts -> runs foreign key,
sequential keys make concurrent SERIALIZABLE admits conflict on the rightmost index page's
predicate lock (docs/performance.md).
"""

from __future__ import annotations

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


def new_id() -> uuid.UUID:
    return uuid.uuid4()


def fire_request(claim: Claim, fire: Fire) -> FireRequest:
    """Mint the Run and Attempt identity for one Fire (and only for a Fire)."""
    return FireRequest(
        claim=claim,
        scheduled_for_ms=fire.scheduled_for_ms,
        next_ms=fire.next_ms,
        coalesced=fire.coalesced,
        run_id=new_id(),
        attempt_id=new_id(),
        idempotency_key=idempotency_key(
            claim.trigger_id, claim.trigger_revision, fire.scheduled_for_ms
        ),
        jitter_offset_ms=fire.jitter_offset_ms,
    )
