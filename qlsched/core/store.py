"""The port the coordinator drives: claim, admit, initialize, skip, release.

Implemented by the PostgreSQL adapter (``qlsched.postgres.store``), the Edge store
(``qlsched.sqlite.store``) and an in-memory store used only by the tests; all pass one
conformance suite. Every method returns typed outcomes; none raises for a lost race, a stale
fence or a changed revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from qlsched.core.control import ActionTotal, ScheduleAction
from qlsched.core.fence import Claim, FireRequest
from qlsched.core.outcomes import Initialize, Outcome, Skip


class ScheduleStore(Protocol):
    """The writes a round makes. Each takes the claim it writes under, then the decision it
    carries out (``release`` carries none: it keeps the cursor as the claim found it)."""

    async def claim(self, owner: str, limit: int, lease_ms: int) -> list[Claim]:
        """Claim up to ``limit`` due or uninitialised rows, each under a fresh fence."""
        ...

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        """Admit a round's Fires together; one outcome per request, in request order."""
        ...

    async def initialize(self, claim: Claim, decision: Initialize) -> Outcome:
        """Set the cursor of an uninitialised revision and clear the claim, under its fence."""
        ...

    async def skip(self, claim: Claim, decision: Skip) -> Outcome:
        """Advance the cursor past a misfire, counting the skipped occurrences."""
        ...

    async def release(self, claim: Claim) -> Outcome:
        """Clear the claim under its fence, leaving the cursor as it is."""
        ...


Settle = tuple[Claim, Initialize | Skip]
"""A decision that moves the cursor without a Run, with the claim it is written under."""


class RoundWriter(Protocol):
    """A store without leases (the Edge's) writes a whole round in one transaction."""

    async def commit(
        self, fires: Sequence[FireRequest], settles: Sequence[Settle] = ()
    ) -> list[Outcome]:
        """The Fires' Runs with their cursors, then the settles; one outcome per write,
        Fires first, each in request order. Raises when nothing of the round was written."""
        ...


class ScheduleRow(msgspec.Struct, frozen=True):
    """One schedule row with its trigger's cron and zone (database times, epoch ms)."""

    project_id: str
    trigger_id: str
    trigger_revision: int
    active: bool
    cron: str
    timezone: str
    next_fire_at_ms: int | None
    last_scheduled_at_ms: int | None
    claim_owner: str | None
    claim_expires_at_ms: int | None
    skipped_total: int
    """Occurrences the ``skip`` policy dropped because they were found past the grace."""
    coalesced_total: int
    """Occurrences passed over by a Fire that admitted an earlier one (either policy)."""
    dst_gap: str = "shift"
    dst_fold: str = "first"
    """The trigger's DST policy (docs/contract.md §3)."""
    jitter_ms: int = 0
    due_at_ms: int | None = None
    """The cursor's due time: the cursor plus its jitter (docs/contract.md §11). None where
    a reader does not give it; then it is the cursor."""
    paused_at_ms: int | None = None
    """When the trigger was paused (None while it runs; always None on Edge)."""
    pause_note: str | None = None
    paused_total: int = 0
    """Occurrences that fell inside pauses and did not run."""
    actions: list[ScheduleAction] = msgspec.field(default_factory=list)
    """The latest control actions, newest first."""
    last_outcome: str | None = None
    """The state of the trigger's latest finished Run (succeeded, failed, cancelled), as a
    worker left it; None before any finished (always None on Edge, which has no worker)."""
    last_duration_ms: int | None = None
    """That Run's time from its first claim by a worker to its end."""
    last_finished_at_ms: int | None = None
    overlap_skipped_total: int = 0
    """Occurrences the trigger's overlap policy gave no Run (docs/contract.md §13)."""
    deadline_cancelled_total: int = 0
    """Runs cancelled because no worker started them by the start deadline."""


class ScheduleView(ScheduleRow, frozen=True, kw_only=True):
    """A schedule row as ``/v1/schedules``, metrics and ``edge status`` show it, with the
    database time it was read at (``qlsched status`` gives that time once, beside its rows)."""

    now_ms: int


DUE_BACKLOG_LIMIT = 1000
"""A reader may count the due backlog up to this many rows and stop (``/metrics`` and
``status`` say so): counting every due row would cost a walk of the whole backlog."""


class ScheduleReader(Protocol):
    async def due_backlog(self) -> int:
        """Active rows due now (database time), claimed or not: the backlog gauge. A reader
        may stop counting at ``DUE_BACKLOG_LIMIT`` (then the count is a lower bound)."""
        ...

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]: ...

    async def list_schedules_after(
        self, after: tuple[str, str], limit: int = 1000
    ) -> list[ScheduleView]:
        """The rows after key ``after`` = (project, trigger) in key order (keyset pages)."""
        ...


class FailingCounts(msgspec.Struct, frozen=True):
    """Database-wide: schedule rows whose last admits failed, those failing long enough to
    be called stuck, and pending requests whose last admits failed (the metrics scrape)."""

    schedules: int = 0
    stuck_schedules: int = 0
    requests: int = 0


class ActionTotalsReader(Protocol):
    async def action_totals(self) -> list[ActionTotal]:
        """Control actions per kind so far, database-wide (the metrics scrape)."""
        ...

    async def failing_counts(self) -> FailingCounts:
        """What is failing again and again, database-wide (the metrics scrape)."""
        ...
