"""Schedule control (docs/contract.md §10): what an operator names, what an action returns,
and the audit rows every action leaves.

Inputs are checked here, before any connection, with the database's own limits (a note of
1..1000 characters, an actor label of 1..200, no NUL), so an action that passes never fails
a CHECK. Outcomes are values: pausing a paused trigger or resuming a running one is an
outcome that says so (``AlreadyPaused``, ``NotPaused``), not an error. A trigger that does
not exist is ``UnknownTrigger`` (bad input).
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from qlsched.core.pause import CatchUp, ResumePlan
from qlsched.core.specs import ID_PATTERN, ID_RULE, quoted
from qlsched.core.utf8 import surrogate_in

NOTE_MAX_CHARS: Final = 1000
"""``note`` and ``pause_note``: length BETWEEN 1 AND 1000."""
ACTOR_MAX_CHARS: Final = 200
"""``schedule_actions.actor_label``: length BETWEEN 1 AND 200."""
ACTION_KINDS: Final = ("pause", "resume", "trigger", "backfill", "cancel")
"""The kinds of ``schedule_actions`` rows this version writes (metrics show each, even at 0)."""
RECENT_ACTIONS: Final = 3
"""How many of a trigger's latest actions status and ``/v1/schedules`` show."""

_ID = re.compile(ID_PATTERN)


class ControlError(ValueError):
    """Bad input to a control action (one line; the commands exit 2)."""


class UnknownTrigger(ControlError):
    """No trigger of that project has that id."""


class TriggerRef(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str

    def __str__(self) -> str:
        return f"{self.project_id}/{self.trigger_id}"


def trigger_ref(text: str) -> TriggerRef:
    """``PROJECT/TRIGGER`` as the commands take it, each part a valid id."""
    if not isinstance(text, str):
        raise ControlError(
            f"a trigger reference must be PROJECT/TRIGGER text, got {type(text).__name__}"
        )
    pair = id_pair(text)
    if pair is None:
        raise ControlError(f"{quoted(text)} is not PROJECT/TRIGGER (each id {ID_RULE})")
    return TriggerRef(*pair)


def id_pair(text: str) -> tuple[str, str] | None:
    """``A/B`` as its two ids (a trigger's or a task's reference), or None when it is not
    two valid ids around one ``/``."""
    first, sep, second = text.partition("/")
    if not sep or not _ID.match(first) or not _ID.match(second):
        return None
    return first, second


def checked_ref(trigger: object) -> TriggerRef:
    """A ``TriggerRef`` or its ``PROJECT/TRIGGER`` text, each part a valid id (a Struct
    built in code skips the check a string gets)."""
    if isinstance(trigger, TriggerRef):
        return trigger_ref(f"{trigger.project_id}/{trigger.trigger_id}")
    return trigger_ref(trigger)  # type: ignore[arg-type]  # any other type is refused there


def checked_text(value: str | None, *, what: str, max_chars: int) -> str | None:
    """A note or actor label as stored: None when absent or blank, else bounded, no NUL,
    UTF-8 text (a lone surrogate from a bad argument is refused, not sent)."""
    if value is not None and not isinstance(value, str):
        raise ControlError(f"{what}: expected text, got {type(value).__name__}")
    if value is None or not value.strip():
        return None
    if surrogate_in(value) is not None:
        raise ControlError(f"{what}: not UTF-8 text (a lone surrogate)")
    if "\x00" in value:
        raise ControlError(f"{what}: contains a NUL character")
    if len(value) > max_chars:
        raise ControlError(f"{what}: longer than {max_chars} characters")
    return value


class ScheduleAction(msgspec.Struct, frozen=True):
    """One row of the append-only ``qlsched.schedule_actions`` (database times)."""

    action_id: int
    kind: str
    """``pause``, ``resume`` (and the kinds later controls add)."""
    at_ms: int
    actor: str
    """The database role that acted (the session's login role)."""
    actor_label: str | None
    """The name the operator gave (``--actor``), if any."""
    note: str | None
    occurrences: int
    """Occurrences the action accounted for (resume: those added to ``paused_total``)."""


class ScheduleControl(msgspec.Struct, frozen=True):
    """A schedule's pause state and its latest actions, as status shows them."""

    paused_at_ms: int | None
    pause_note: str | None
    paused_total: int
    actions: list[ScheduleAction]


class ActionTotal(msgspec.Struct, frozen=True):
    """All actions of one kind so far, database-wide (``schedule_action_totals``)."""

    kind: str
    actions: int
    occurrences: int


# --- outcomes --------------------------------------------------------------------------------


class _ControlOutcome(msgspec.Struct, frozen=True, tag_field="outcome"):
    project_id: str
    trigger_id: str


class Paused(_ControlOutcome, frozen=True, tag="paused"):
    """The trigger was running and is paused from ``paused_at_ms`` (any claim on it is void)."""

    paused_at_ms: int
    note: str | None
    action_id: int


class AlreadyPaused(_ControlOutcome, frozen=True, tag="already_paused"):
    """Nothing changed: the trigger was paused already (no action recorded)."""

    paused_at_ms: int
    note: str | None


class Resumed(_ControlOutcome, frozen=True, tag="resumed"):
    """The trigger runs again from ``next_fire_at_ms``."""

    resumed_at_ms: int
    catch_up: CatchUp
    inside: int
    """Occurrences that fell inside the pause."""
    paused: int
    """Of those, the ones that will not run (added to ``paused_total``)."""
    next_fire_at_ms: int | None
    fires_at_ms: int | None
    """With ``fire_once``: the occurrence the next round fires once, else None."""
    scheduled: bool
    """False when the project is archived or the trigger disabled: resumed, but nothing is
    scheduled until a publish makes it active (and nothing was counted)."""
    action_id: int


def resumed(
    ref: TriggerRef,
    plan: ResumePlan,
    *,
    at_ms: int,
    catch_up: CatchUp,
    scheduled: bool,
    action_id: int,
) -> Resumed:
    """What a resume committed, from its plan (both profiles answer alike)."""
    return Resumed(
        ref.project_id,
        ref.trigger_id,
        resumed_at_ms=at_ms,
        catch_up=catch_up,
        inside=plan.inside,
        paused=plan.paused,
        next_fire_at_ms=plan.next_fire_at_ms,
        fires_at_ms=plan.catch_up_at_ms,
        scheduled=scheduled,
        action_id=action_id,
    )


class NotPaused(_ControlOutcome, frozen=True, tag="not_paused"):
    """Nothing changed: the trigger was not paused (no action recorded)."""


PauseOutcome = Paused | AlreadyPaused
ResumeOutcome = Resumed | NotPaused


class ScheduleHead(msgspec.Struct, frozen=True):
    """A schedule's key and its trigger's spec: the fields every listing of schedules starts
    with (``ScheduleState`` here, the dashboard's rows in ``postgres.ui``)."""

    project_id: str
    trigger_id: str
    trigger_revision: int
    active: bool
    """Claimable: project active, trigger enabled, revision current, not paused."""
    enabled: bool
    cron: str
    timezone: str
    misfire_policy: str
    misfire_grace_ms: int


class ScheduleState(ScheduleHead, frozen=True):
    """One schedule as the admin API lists it: spec, cursor, counters and control state
    (database times, epoch ms)."""

    next_fire_at_ms: int | None
    last_scheduled_at_ms: int | None
    paused: bool
    paused_at_ms: int | None
    pause_note: str | None
    paused_total: int
    """Occurrences that fell inside pauses and did not run."""
    skipped_total: int
    coalesced_total: int
    claim_owner: str | None
    claim_expires_at_ms: int | None
    actions: list[ScheduleAction]
    """The latest actions, newest first."""
