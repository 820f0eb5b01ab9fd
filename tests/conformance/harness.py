"""The store-agnostic test harness the conformance suite is written against.

A harness wraps one store implementation (the in-memory store, the PostgreSQL adapter) and
gives the suite what publish and an observer would: create and re-publish triggers, move a
cursor or a claim's expiry, and read schedule rows and Runs back. The suite never touches an
implementation directly, so every store passes the very same tests.
"""

from __future__ import annotations

import uuid
from typing import Protocol

import msgspec

from qlsched.core.requests import RecordResult, RequestOverlap, RequestStore
from qlsched.core.specs import Overlap, ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.core.store import ScheduleReader, ScheduleStore


class ScheduleRow(msgspec.Struct, frozen=True):
    """One ``trigger_schedules`` row as stored (database times, epoch ms)."""

    trigger_revision: int
    next_fire_at_ms: int | None
    last_scheduled_at_ms: int | None
    state_version: int
    claim_owner: str | None
    claim_token: uuid.UUID | None
    claim_version: int
    claim_expires_at_ms: int | None
    skipped_total: int
    coalesced_total: int


class RunRow(msgspec.Struct, frozen=True):
    """One admitted Run with its attempt and event counts and the fence it was admitted under."""

    project_id: str
    trigger_id: str
    trigger_revision: int
    scheduled_for_ms: int
    idempotency_key: str
    attempts: int
    events: int
    admitted_by_owner: str
    admitted_claim_token: uuid.UUID
    admitted_claim_version: int


class StoreHarness(Protocol):
    leases: bool
    """The store's capability. True (memory, PostgreSQL): a claim writes a lease fence into
    the row, hides it from other claimers until it expires, and every write checks owner,
    token, claim version, expiry and state version. False (the Edge store, one process per
    file): a claim is a read that hides nothing and never expires (no takeover); writes are
    fenced by the trigger revision, the state version and the cursor (compare-and-set)."""

    @property
    def store(self) -> ScheduleStore: ...

    @property
    def reader(self) -> ScheduleReader: ...

    async def add_trigger(
        self,
        project_id: str,
        trigger_id: str,
        cron: str,
        *,
        timezone: str = "UTC",
        misfire_policy: str = "skip",
        misfire_grace_ms: int = 60_000,
        enabled: bool = True,
        jitter_ms: int = 0,
        overlap: Overlap = "allow",
        start_deadline_ms: int | None = None,
    ) -> None:
        """Publish a new trigger (its project active, created if missing): cursor NULL."""
        ...

    async def pause(self, project_id: str, trigger_id: str) -> None:
        """Pause the trigger as ``pause`` / ``edge pause`` do (no note, no actor)."""
        ...

    async def resume(self, project_id: str, trigger_id: str) -> None:
        """Resume it with catch-up ``skip`` as ``resume`` / ``edge resume`` do."""
        ...

    async def republish(self, project_id: str, trigger_id: str, cron: str) -> None:
        """Publish a new revision: cursor and claim cleared, state and claim versions + 1."""
        ...

    async def now_ms(self) -> int:
        """The store's own clock (the database time)."""
        ...

    async def set_cursor(
        self, project_id: str, trigger_id: str, next_fire_at_ms: int | None
    ) -> None:
        """Move the cursor as a cursor write of the store would (its due time follows)."""
        ...

    async def expire_claim(self, project_id: str, trigger_id: str) -> None:
        """Move the row's claim expiry into the past (the claim stays otherwise as it is)."""
        ...

    async def schedule(self, project_id: str, trigger_id: str) -> ScheduleRow: ...

    async def runs(self) -> list[RunRow]:
        """Every Run, ordered by (project_id, trigger_id, scheduled_for_ms)."""
        ...


class RequestRow(msgspec.Struct, frozen=True):
    """One request as stored: what it is and how far it got."""

    request_id: uuid.UUID
    kind: str
    state: str
    admitted: int
    already_admitted: int
    refused_reason: str | None
    failures: int
    overlap_skipped: int = 0


class RequestHarness(StoreHarness, Protocol):
    """A store with trigger-now and backfill requests (the PostgreSQL adapter and the Edge
    file): recorded as the operator's command records them, served by the profile's own
    requests pass (the cluster's ``RequestsPass``, the Edge's ``EdgeRequests``)."""

    @property
    def request_store(self) -> RequestStore:
        """The store's request port, for a test to claim and admit chunk by chunk."""
        ...

    async def record_trigger_now(self, project_id: str, trigger_id: str) -> RecordResult: ...

    async def record_backfill(
        self,
        project_id: str,
        trigger_id: str,
        from_ms: int,
        to_ms: int,
        max_occurrences: int = 10_000,
        overlap: RequestOverlap | None = None,
    ) -> RecordResult: ...

    async def serve_requests(self, budget: int) -> None:
        """One requests pass of the profile, with claim budget ``budget``."""
        ...

    async def requests(self) -> list[RequestRow]:
        """Every request, in the order they were recorded."""
        ...

    async def break_run_inserts(self, trigger_id: str) -> None:
        """From now on every Run insert of ``trigger_id`` fails (a database trigger)."""
        ...


class RunState(msgspec.Struct, frozen=True):
    """Where a Run of the trigger is in its lifecycle, and why it was cancelled."""

    scheduled_for_ms: int
    state: str
    cancel_reason: str | None
    cancel_requested: bool
    events: list[str]


class OverlapHarness(RequestHarness, Protocol):
    """A store whose admits follow the overlap policy and the start deadline (docs/contract.md
    §13), with the test playing the worker or dispatcher that moves Runs."""

    async def move_run(self, trigger_id: str, scheduled_for_ms: int, state: str) -> None:
        """As a worker (or an Edge dispatcher) would: ``running`` (started now) or a
        terminal state (finished now)."""
        ...

    async def run_states(self, trigger_id: str) -> list[RunState]:
        """The trigger's Runs in occurrence order."""
        ...

    async def runs_pass(self) -> None:
        """One runs pass of the profile: start deadlines, then held Runs released."""
        ...

    async def overlap_totals(self, project_id: str, trigger_id: str) -> tuple[int, int]:
        """The row's (overlap_skipped_total, deadline_cancelled_total)."""
        ...


class PublishingHarness:
    """What the harnesses over a real publisher share: the triggers published so far, and
    one file that publishes them all again (each project with its one task) whenever a
    trigger is added or re-published. A subclass says how a file is published."""

    def __init__(self) -> None:
        self._triggers: dict[tuple[str, str], TriggerEntry] = {}

    async def _publish_file(self, spec: PublishFile) -> None:
        raise NotImplementedError

    async def _publish(self) -> None:
        projects = sorted({p for p, _ in self._triggers})
        await self._publish_file(
            PublishFile(
                projects=[ProjectEntry(id=p) for p in projects],
                tasks=[TaskEntry(project=p, id="task", command="true") for p in projects],
                triggers=list(self._triggers.values()),
            )
        )

    async def add_trigger(
        self,
        project_id: str,
        trigger_id: str,
        cron: str,
        *,
        timezone: str = "UTC",
        misfire_policy: str = "skip",
        misfire_grace_ms: int = 60_000,
        enabled: bool = True,
        jitter_ms: int = 0,
        overlap: Overlap = "allow",
        start_deadline_ms: int | None = None,
    ) -> None:
        self._triggers[(project_id, trigger_id)] = TriggerEntry(
            project=project_id,
            id=trigger_id,
            task="task",
            cron=cron,
            timezone=timezone,
            misfire=misfire_policy,  # type: ignore[arg-type]
            misfire_grace_ms=misfire_grace_ms,
            enabled=enabled,
            jitter_ms=jitter_ms,
            overlap=overlap,
            start_deadline_ms=start_deadline_ms,
        )
        await self._publish()

    async def republish(self, project_id: str, trigger_id: str, cron: str) -> None:
        old = self._triggers[(project_id, trigger_id)]
        self._triggers[(project_id, trigger_id)] = msgspec.structs.replace(old, cron=cron)
        await self._publish()
