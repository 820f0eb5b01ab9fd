"""The claim: the four-part lease fence plus the versions and spec a decision needs.

A replica may write to a schedule row only while all four parts still match (owner, token,
version, expiry against the database's own time) and the state version is the one the claim
produced. Owner alone or expiry alone would let an old replica commit after an ABA takeover.
"""

from __future__ import annotations

import uuid

import msgspec

from qlsched.core.jitter import Jitter
from qlsched.core.outcomes import FenceLost, RevisionChanged
from qlsched.core.specs import Overlap


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
    locator: str | None = None
    """Where the store found the row (PostgreSQL: the claimed version's tuple id), so its
    admit can reach it without an index probe. A hint, never trusted: the admit re-checks
    the key and the whole fence, and a stale locator only costs a second try by key."""
    dst_gap: str = "shift"
    dst_fold: str = "first"
    """The trigger's DST policy (docs/contract.md §3), read with its cron and zone; the
    defaults are the rule of triggers published before the policy existed."""
    jitter_ms: int = 0
    """The revision's jitter bound (docs/contract.md §10); 0: due at the scheduled time."""
    overlap: Overlap = "allow"
    start_deadline_ms: int | None = None
    """The revision's overlap policy and start deadline (docs/contract.md §13), read by the
    Edge's claim for its admit; the cluster's admit reads them from the trigger row itself."""

    @property
    def key(self) -> TriggerKey:
        return TriggerKey(self.project_id, self.trigger_id)

    @property
    def jitter(self) -> Jitter | None:
        """What ``decide`` needs to find this row's due times; None without jitter."""
        if not self.jitter_ms:
            return None
        return Jitter(self.project_id, self.trigger_id, self.trigger_revision, self.jitter_ms)

    def jitter_offset_ms(self, scheduled_for_ms: int) -> int:
        """``h`` of one occurrence of this row's revision (0 without jitter)."""
        jitter = self.jitter
        return jitter.offset_ms(scheduled_for_ms) if jitter is not None else 0

    @property
    def spec_key(self) -> tuple[object, ...]:
        """Everything the decision spec is built from: claims equal here decide alike."""
        return (
            self.cron,
            self.timezone,
            self.misfire_policy,
            self.misfire_grace_ms,
            self.dst_gap,
            self.dst_fold,
        )


class FireRequest(msgspec.Struct, frozen=True):
    """A Fire decision ready to admit: identities are minted only here, only for a Fire."""

    claim: Claim
    scheduled_for_ms: int
    next_ms: int
    coalesced: int
    run_id: uuid.UUID
    attempt_id: uuid.UUID
    idempotency_key: str
    jitter_offset_ms: int = 0
    """Due at ``scheduled_for_ms + jitter_offset_ms``: the lag is measured from there."""

    @property
    def due_ms(self) -> int:
        """When the occurrence falls due, by the database clock."""
        return self.scheduled_for_ms + self.jitter_offset_ms


class ObservedSchedule(msgspec.Struct, frozen=True):
    """A schedule row as a refused write saw it: enough to name the part that failed."""

    trigger_revision: int
    claim_owner: str | None
    claim_token: uuid.UUID | None
    claim_version: int
    claim_expires_at_ms: int | None
    state_version: int
    next_fire_at_ms: int | None


def failed_part(
    claim: Claim, observed: ObservedSchedule | None, now_ms: int, expected_cursor: int | None
) -> FenceLost | RevisionChanged | None:
    """The first part of the fence (or the cursor) that no longer holds in ``observed``, as
    the outcome naming it; None when every part holds.

    The order is the one a fenced WHERE lists them in: revision, owner, token, version,
    expiry, state, cursor. The observation is diagnostic; the WHERE clause decided.
    """
    p, t = claim.project_id, claim.trigger_id
    if observed is None:
        return FenceLost(p, t, part="missing")
    if observed.trigger_revision != claim.trigger_revision:
        return RevisionChanged(p, t, part="trigger")
    if observed.claim_owner != claim.fence.owner:
        return FenceLost(p, t, part="owner")
    if observed.claim_token != claim.fence.token:
        return FenceLost(p, t, part="token")
    if observed.claim_version != claim.fence.version:
        return FenceLost(p, t, part="version")
    if observed.claim_expires_at_ms is None or observed.claim_expires_at_ms <= now_ms:
        return FenceLost(p, t, part="expiry")
    if observed.state_version != claim.state_version:
        return FenceLost(p, t, part="state")
    if observed.next_fire_at_ms != expected_cursor:
        return RevisionChanged(p, t, part="cursor")
    return None


def refusal(
    claim: Claim, observed: ObservedSchedule | None, now_ms: int, expected_cursor: int | None
) -> FenceLost | RevisionChanged:
    """Why a fenced write touched no row, as the outcome naming the part that failed."""
    part = failed_part(claim, observed, now_ms, expected_cursor)
    if part is None:
        # Nothing differs in what we observed: the row changed between observation and write.
        return FenceLost(claim.project_id, claim.trigger_id, part="state")
    return part
