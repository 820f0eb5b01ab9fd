"""The claim: the four-part lease fence plus the versions and spec a decision needs.

A replica may write to a schedule row only while all four parts still match (owner, token,
version, expiry against the database's own time) and the state version is the one the claim
produced. Owner alone or expiry alone would let an old replica commit after an ABA takeover.
"""

from __future__ import annotations

import uuid

import msgspec


class ClaimFence(msgspec.Struct, frozen=True):
    owner: str
    token: uuid.UUID
    version: int
    expires_at_ms: int


class TriggerKey(msgspec.Struct, frozen=True, order=True):
    project_id: str
    trigger_id: str


class Claim(msgspec.Struct, frozen=True):
    """One claimed schedule row, as the claim statement returned it (all times from the DB)."""

    project_id: str
    trigger_id: str
    trigger_revision: int
    state_version: int
    fence: ClaimFence
    cursor_ms: int | None
    """``next_fire_at_ms``; None while the revision is uninitialised."""
    claimed_at_ms: int
    """The database time the claim was taken: the ``now`` of its decision."""
    cron: str
    timezone: str
    misfire_policy: str
    misfire_grace_ms: int
    trigger_digest: str
    task_id: str
    task_revision: int
    execution_revision_id: uuid.UUID

    @property
    def key(self) -> TriggerKey:
        return TriggerKey(self.project_id, self.trigger_id)


class FireRequest(msgspec.Struct, frozen=True):
    """A Fire decision ready to admit: identities are minted only here, only for a Fire."""

    claim: Claim
    scheduled_for_ms: int
    next_ms: int
    coalesced: int
    run_id: uuid.UUID
    attempt_id: uuid.UUID
    idempotency_key: str


class ObservedSchedule(msgspec.Struct, frozen=True):
    """A schedule row as a refused write saw it: enough to name the part that failed."""

    trigger_revision: int
    claim_owner: str | None
    claim_token: uuid.UUID | None
    claim_version: int
    claim_expires_at_ms: int | None
    state_version: int
    next_fire_at_ms: int | None


def refusal(
    claim: Claim, observed: ObservedSchedule | None, now_ms: int, expected_cursor: int | None
) -> tuple[str, str]:
    """Why a fenced write touched no row: (``fence_lost`` | ``revision_changed``, part).

    The order is the one the admit statement checks in: revision, owner, token, version,
    expiry, state, cursor. The observation is diagnostic; the WHERE clause decided.
    """
    if observed is None:
        return "fence_lost", "missing"
    if observed.trigger_revision != claim.trigger_revision:
        return "revision_changed", "trigger"
    if observed.claim_owner != claim.fence.owner:
        return "fence_lost", "owner"
    if observed.claim_token != claim.fence.token:
        return "fence_lost", "token"
    if observed.claim_version != claim.fence.version:
        return "fence_lost", "version"
    if observed.claim_expires_at_ms is None or observed.claim_expires_at_ms <= now_ms:
        return "fence_lost", "expiry"
    if observed.state_version != claim.state_version:
        return "fence_lost", "state"
    if observed.next_fire_at_ms != expected_cursor:
        return "revision_changed", "cursor"
    # Nothing differs in what we observed: the row changed between observation and write.
    return "fence_lost", "state"
