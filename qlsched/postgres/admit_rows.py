"""What an admit statement's rows mean: each result row as its outcome, and the Fires as
the statement's parameters.

admit.sql names a refusal that needs no schedule row as ``(refusal_kind, refusal_part)``
(``REFUSALS`` decodes it); a row it did not advance is read back, so the part of the fence
that failed is named from what the same statement observed (``core.fence.failed_part``);
a row not due yet by the statement's clock comes back as ``Early``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec

from qlsched.core.fence import FireRequest, failed_part
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    DigestInvalid,
    Inactive,
    Outcome,
    OverlapSkipped,
    RetryExhausted,
    RevisionChanged,
)
from qlsched.postgres.claim import observed_schedule

SpecRefusal = RevisionChanged | DigestInvalid | Inactive
"""An admit refused by a check that needs no schedule row (the ``specs`` step of admit.sql)."""

REFUSALS: Final[Mapping[tuple[str, str], Callable[[str, str], SpecRefusal]]] = {
    ("inactive", "project_missing"): lambda p, t: Inactive(p, t, reason="project_missing"),
    ("inactive", "project_archived"): lambda p, t: Inactive(p, t, reason="project_archived"),
    ("inactive", "trigger_disabled"): lambda p, t: Inactive(p, t, reason="trigger_disabled"),
    ("revision_changed", "trigger"): lambda p, t: RevisionChanged(p, t, part="trigger"),
    ("revision_changed", "task"): lambda p, t: RevisionChanged(p, t, part="task"),
    ("revision_changed", "execution"): lambda p, t: RevisionChanged(p, t, part="execution"),
    ("digest_invalid", "executor"): lambda p, t: DigestInvalid(p, t, part="executor"),
    ("digest_invalid", "execution"): lambda p, t: DigestInvalid(p, t, part="execution"),
    ("digest_invalid", "task"): lambda p, t: DigestInvalid(p, t, part="task"),
}
"""Every ``(refusal_kind, refusal_part)`` admit.sql returns, to the outcome it names: the
kind is the outcome's tag, the part its ``part`` (or ``reason``)."""


class UnknownRefusal(Exception):
    """admit.sql returned a ``(kind, part)`` that ``REFUSALS`` does not hold: the SQL and
    this module disagree (a bug, never a database state)."""

    def __init__(self, kind: str, part: str) -> None:
        super().__init__(f"unknown admit refusal ({kind!r}, {part!r})")
        self.kind = kind
        self.part = part


class MixedOwners(ValueError):
    """One admit call held Fires claimed by more than one owner: the statement is sent for
    one owner (a replica claims under one), so the caller must split such a batch."""


def decode_refusal(kind: str, part: str, project_id: str, trigger_id: str) -> SpecRefusal:
    """The outcome admit.sql's ``(refusal_kind, refusal_part)`` names.

    Raises:
        UnknownRefusal: the pair is not one the SQL returns.
    """
    make = REFUSALS.get((kind, part))
    if make is None:
        raise UnknownRefusal(kind, part)
    return make(project_id, trigger_id)


def one_owner(fires: Sequence[FireRequest]) -> str:
    """The owner every Fire was claimed by.

    Raises:
        MixedOwners: the Fires were claimed by more than one owner.
    """
    owner = fires[0].claim.fence.owner
    if any(f.claim.fence.owner != owner for f in fires):
        raise MixedOwners("an admit's Fires must all be claimed by one owner")
    return owner


class Rows(msgspec.Struct, frozen=True):
    """The statement committed: its result rows, one per Fire, in request order."""

    rows: list[Any]


class Ended(msgspec.Struct, frozen=True):
    """The statement ended its Fires without a row each (retries spent, a timeout, a lost
    connection): one outcome per Fire, no fallback."""

    outcomes: list[Outcome]


class Early(msgspec.Struct, frozen=True):
    """A row left untouched because it is not due yet by the database clock (claimed
    ahead, sent a little early): sent again once ``due_in_ms`` has passed."""

    due_in_ms: int


class Failed(msgspec.Struct, frozen=True):
    """A constraint or other server error: nothing was written."""

    sqlstate: str | None
    exception: str


def by_key(fire: FireRequest) -> FireRequest:
    """The same Fire without its locator: the admit then finds the row by its key."""
    return msgspec.structs.replace(fire, claim=msgspec.structs.replace(fire.claim, locator=None))


def exhausted(fire: FireRequest, attempts: int, state: str | None) -> Outcome:
    return RetryExhausted(
        fire.claim.project_id, fire.claim.trigger_id, attempts=attempts, sqlstate=state or ""
    )


def row_outcome(fire: FireRequest, row: Any) -> Outcome | Early | None:
    """One admit result row as its outcome; ``Early``: not due yet by the statement's clock;
    None: the row was left untouched although its fence, cursor and specs hold (held by
    another session, or not at its locator)."""
    if row["admitted_at_ms"] is not None and row["key_taken"]:
        return AlreadyAdmitted(
            fire.claim.project_id,
            fire.claim.trigger_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=row["admitted_at_ms"],
        )
    if row["admitted_at_ms"] is not None and row["overlap"] == "skip":
        return OverlapSkipped(
            fire.claim.project_id,
            fire.claim.trigger_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            admitted_at_ms=row["admitted_at_ms"],
        )
    if row["admitted_at_ms"] is not None:
        return Admitted(
            fire.claim.project_id,
            fire.claim.trigger_id,
            run_id=fire.run_id,
            attempt_id=fire.attempt_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=row["admitted_at_ms"],
            held=row["overlap"] == "hold",
        )
    claim = fire.claim
    part = failed_part(claim, observed_schedule(row), row["now_ms"], fire.scheduled_for_ms)
    if part is not None:
        return part
    if row["refusal_kind"] is not None:
        return decode_refusal(
            row["refusal_kind"], row["refusal_part"], claim.project_id, claim.trigger_id
        )
    if row["due_at_ms"] is not None and row["due_at_ms"] > row["now_ms"]:
        return Early(row["due_at_ms"] - row["now_ms"])
    return None


def admit_args(fires: Sequence[FireRequest], *, wait: bool = False) -> list[Any]:
    c = [f.claim for f in fires]
    return [
        [x.project_id for x in c],
        [x.trigger_id for x in c],
        [x.fence.token for x in c],
        [x.fence.version for x in c],
        [x.state_version for x in c],
        [x.trigger_revision for x in c],
        [x.trigger_digest for x in c],
        [x.task_revision for x in c],
        [x.execution_revision_id for x in c],
        [f.scheduled_for_ms for f in fires],
        [f.next_ms for f in fires],
        [f.coalesced for f in fires],
        [f.run_id for f in fires],
        [f.attempt_id for f in fires],
        [f.idempotency_key for f in fires],
        [x.locator for x in c],
        wait,
    ]
