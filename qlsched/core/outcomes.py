"""Decisions and store outcomes as closed unions of frozen msgspec Structs.

Each variant carries an explicit snake_case ``tag`` under ``tag_field="outcome"``: the tag is
a code that survives renames and doubles as the diagnostic ``code`` and the metric label.
Callers ``match`` on the variant and end with ``assert_never`` so mypy flags a missed case.
Outcomes of the store are values, never exceptions: a lost race is normal operation.
"""

from __future__ import annotations

import uuid
from typing import Final, Generic, Literal, TypeVar, get_args

import msgspec

# --- decisions (core.decide) -------------------------------------------------------------


class _Decision(msgspec.Struct, frozen=True, tag_field="outcome"):
    pass


class Initialize(_Decision, frozen=True, tag="initialize"):
    """The cursor was NULL (new or re-published revision): set it, create no Run."""

    next_ms: int


class NotDue(_Decision, frozen=True, tag="not_due"):
    """``now < cursor``: release the claim untouched."""


class Fire(_Decision, frozen=True, tag="fire"):
    """Admit exactly one Run for ``scheduled_for_ms`` (always the durable cursor)."""

    scheduled_for_ms: int
    next_ms: int
    coalesced: int = 0
    """Occurrences in ``(cursor, now]`` passed over and not run (counted, never replayed)."""
    jitter_offset_ms: int = 0
    """The occurrence's jitter ``h``: it was due at ``scheduled_for_ms + jitter_offset_ms``."""


class Skip(_Decision, frozen=True, tag="skip"):
    """Misfire past the grace under policy ``skip``: advance the cursor, create no Run."""

    next_ms: int
    skipped: int
    """Occurrences in ``[cursor, now]`` skipped by policy (at least 1)."""


Decision = Initialize | NotDue | Fire | Skip

# --- outcomes of the store (claim-scoped writes) -----------------------------------------

FencePart = Literal["owner", "token", "version", "expiry", "state", "missing"]
RevisionPart = Literal["trigger", "task", "execution", "cursor"]
DigestPart = Literal["trigger", "task", "execution", "executor"]
InactiveReason = Literal["project_archived", "trigger_disabled", "project_missing"]
P = TypeVar("P", FencePart, RevisionPart, DigestPart)


class _Outcome(msgspec.Struct, frozen=True, tag_field="outcome"):
    project_id: str
    trigger_id: str


class Admitted(_Outcome, frozen=True, tag="admitted"):
    """A queued Run, its claimed Attempt, two events and the cursor committed together."""

    run_id: uuid.UUID
    attempt_id: uuid.UUID
    scheduled_for_ms: int
    idempotency_key: str
    admitted_at_ms: int
    held: bool = False
    """Admitted ``held`` (overlap ``buffer_one``): no worker claims it until another Run of
    its trigger ends and releases it."""


class OverlapSkipped(_Outcome, frozen=True, tag="overlap_skipped"):
    """The trigger's overlap policy found a Run of it unfinished (``skip``, or one already
    held under ``buffer_one``): the cursor moved with no Run, and the row counts it."""

    scheduled_for_ms: int
    admitted_at_ms: int


class AlreadyAdmitted(_Outcome, frozen=True, tag="already_admitted"):
    """The Fire's key already had a Run (a backfill took the occurrence first): the cursor
    moved past it with no second Run, so a taken key is never a retry loop."""

    scheduled_for_ms: int
    idempotency_key: str
    admitted_at_ms: int


class _CursorSet(_Outcome, frozen=True):
    next_ms: int
    """The cursor as written (the next occurrence), under the claim's fence."""


class Initialized(_CursorSet, frozen=True, tag="initialized"):
    """A NULL cursor set to the first occurrence; no Run."""


class Skipped(_CursorSet, frozen=True, tag="skipped"):
    """The cursor moved past occurrences skipped by policy; no Run."""

    skipped: int


class Released(_Outcome, frozen=True, tag="released"):
    """The claim was cleared under its fence without touching the cursor."""


class _PartFailed(_Outcome, Generic[P], frozen=True):
    part: P
    """The first part of the check that failed (a closed enum: a diagnostic and a label)."""


class FenceLost(_PartFailed[FencePart], frozen=True, tag="fence_lost"):
    """The claim no longer holds; ``part`` names the first fence part that failed."""


class RevisionChanged(_PartFailed[RevisionPart], frozen=True, tag="revision_changed"):
    """A pinned revision (or the cursor) moved since the claim: a re-publish raced it."""


class DigestInvalid(_PartFailed[DigestPart], frozen=True, tag="digest_invalid"):
    """Fail closed: a content digest or the pinned execution revision does not verify."""


class Inactive(_Outcome, frozen=True, tag="inactive"):
    """The project is archived or missing, or the trigger disabled: nothing is admitted."""

    reason: InactiveReason


class CommitUnknown(_Outcome, frozen=True, tag="commit_unknown"):
    """The connection was lost while the write may have committed: never re-admitted here."""

    exception: str


LOCK_NOT_AVAILABLE: Final = "55P03"
"""SQLSTATE of a lock wait cut by the runtime role's ``lock_timeout``."""


class RetryExhausted(_Outcome, frozen=True, tag="retry_exhausted"):
    """Serialization failures or deadlocks outlasted the retry budget or the lease, or a
    lock or statement timeout ended the statement."""

    attempts: int
    sqlstate: str


def lock_waited(outcome: Outcome) -> bool:
    """Another session held the rows past the lock timeout: the statement wrote nothing
    and the claim still holds, so the Fire may be sent again while its lease has room."""
    return isinstance(outcome, RetryExhausted) and outcome.sqlstate == LOCK_NOT_AVAILABLE


class StoreFailed(_Outcome, frozen=True, tag="store_failed"):
    """Any other database error: classified, never echoed (no driver message)."""

    sqlstate: str | None
    exception: str


Outcome = (
    Admitted
    | AlreadyAdmitted
    | OverlapSkipped
    | Initialized
    | Skipped
    | Released
    | FenceLost
    | RevisionChanged
    | DigestInvalid
    | Inactive
    | CommitUnknown
    | RetryExhausted
    | StoreFailed
)


def outcome_code_of(variant: type[msgspec.Struct]) -> str:
    """The stable tag of a variant class."""
    tag = variant.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def outcome_code(outcome: Outcome | Decision) -> str:
    """The stable tag of a variant: the diagnostic code and the metric label."""
    return outcome_code_of(type(outcome))


OUTCOME_CODES: Final = tuple(outcome_code_of(variant) for variant in get_args(Outcome))
"""Every store outcome's tag, in the union's order: the metric labels, pre-created at 0 so
a dashboard sees each series from the first scrape."""
