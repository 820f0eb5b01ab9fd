"""An in-memory ``ScheduleStore`` + ``ScheduleReader`` with the PostgreSQL adapter's semantics.

For Trio MockClock lifecycle tests only; it passes the same conformance suite as the adapter
(``tests/conformance``). The rules it mirrors (docs/contract.md §5):

- claim: active rows (project active, trigger enabled, schedule revision current) that are
  due (``due_at_ms <= now``: the cursor plus its jitter, ``core.jitter``) or uninitialised
  (NULL) and hold no valid claim (token NULL or ``claim_expires_at_ms <= now``), ordered
  ``due_at_ms NULLS FIRST, project_id, trigger_id``, at most ``limit``; each gets owner, a
  new uuid4 token, ``claim_version + 1``, expiry ``now + lease``, ``state_version + 1``,
  ``updated_at_ms = now``;
- every claim-scoped write checks, in the adapter's order, the row exists (``missing``),
  the trigger revision, the fence parts owner, token, version, expiry (``> now``), state,
  and the cursor (the claim's for initialize/skip/release, ``scheduled_for`` for admit),
  and reports the first that fails;
- admit then checks the project is active, the trigger's revision, digest and pins unchanged,
  the trigger enabled and the execution revision's digest, and writes the Run, one Attempt,
  two events and the cursor together, or nothing;
- each write bumps ``state_version`` and clears the claim (``claim_version`` is a counter
  and stays);
- the due backlog counts active rows due or uninitialised, claimed or not.

Its clock is an injected ``now_ms`` (the database clock's stand-in); ``updated_at_ms`` never
moves backwards. Each port method passes one Trio checkpoint before it reads or writes, and
writes without a checkpoint in between, as one statement would.

Test hooks: ``hook(method)`` is awaited at the entry of every port method (``claim``,
``admit``, ``initialize``, ``skip``, ``release``, ``due_backlog``, ``list_schedules``,
``list_schedules_after``) and may sleep, block forever or raise; ``calls`` records each
call as ``(method, size)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Sequence

import trio

from qlsched.core.cron import parse_cron
from qlsched.core.fence import Claim, ClaimFence, FireRequest, TriggerKey
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.outcomes import (
    Admitted,
    DigestInvalid,
    FenceLost,
    Inactive,
    Initialize,
    Initialized,
    Outcome,
    Released,
    RevisionChanged,
    Skip,
    Skipped,
    StoreFailed,
)
from qlsched.core.pause import plan_resume
from qlsched.core.store import ScheduleView

Hook = Callable[[str], Awaitable[None]]


@dataclasses.dataclass
class StoredTrigger:
    project_id: str
    trigger_id: str
    revision: int
    cron: str
    timezone: str
    misfire_policy: str
    misfire_grace_ms: int
    enabled: bool
    task_id: str
    task_revision: int
    execution_revision_id: uuid.UUID
    execution_digest_ok: bool = True
    jitter_ms: int = 0

    @property
    def digest(self) -> str:
        content = "\x1f".join(
            (
                self.cron,
                self.timezone,
                self.misfire_policy,
                str(self.misfire_grace_ms),
                str(self.enabled),
                self.task_id,
                str(self.task_revision),
                str(self.execution_revision_id),
            )
        )
        return hashlib.sha256(content.encode()).hexdigest()


@dataclasses.dataclass
class StoredSchedule:
    trigger_revision: int
    next_fire_at_ms: int | None = None
    last_scheduled_at_ms: int | None = None
    state_version: int = 1
    claim_owner: str | None = None
    claim_token: uuid.UUID | None = None
    claim_version: int = 0
    claim_expires_at_ms: int | None = None
    updated_at_ms: int = 0
    skipped_total: int = 0
    coalesced_total: int = 0

    def clear_claim(self) -> None:
        self.claim_owner = None
        self.claim_token = None
        self.claim_expires_at_ms = None


@dataclasses.dataclass(frozen=True)
class StoredRun:
    run_id: uuid.UUID
    project_id: str
    trigger_id: str
    trigger_revision: int
    task_id: str
    task_revision: int
    execution_revision_id: uuid.UUID
    scheduled_for_ms: int
    idempotency_key: str
    queued_at_ms: int
    admitted_by_owner: str
    admitted_claim_token: uuid.UUID
    admitted_claim_version: int
    state: str = "queued"


@dataclasses.dataclass(frozen=True)
class StoredAttempt:
    attempt_id: uuid.UUID
    run_id: uuid.UUID
    attempt_no: int = 1
    executor_kind: str = "remote_worker"
    state: str = "claimed"


@dataclasses.dataclass(frozen=True)
class StoredEvent:
    run_id: uuid.UUID
    seq: int
    type: str
    at_ms: int


class MemoryStore:
    """The store port and reader over plain dicts; admin methods stand in for ``publish``."""

    def __init__(self, now_ms: Callable[[], int], *, hook: Hook | None = None) -> None:
        self._now_ms = now_ms
        self.hook = hook
        self.calls: list[tuple[str, int]] = []
        self.projects: dict[str, str] = {}
        self.triggers: dict[TriggerKey, StoredTrigger] = {}
        self.schedules: dict[TriggerKey, StoredSchedule] = {}
        self.runs: dict[str, StoredRun] = {}
        self.attempts: list[StoredAttempt] = []
        self.events: list[StoredEvent] = []
        self.paused: set[TriggerKey] = set()

    # --- admin (publish's stand-in; synchronous, no hook) ------------------------------

    def add_trigger(
        self,
        project_id: str,
        trigger_id: str,
        cron: str,
        *,
        timezone: str = "UTC",
        misfire_policy: str = "skip",
        misfire_grace_ms: int = 60_000,
        enabled: bool = True,
        task_id: str = "task",
        jitter_ms: int = 0,
    ) -> None:
        """Publish a new trigger (and its project, active, if new) with an uninitialised row."""
        key = TriggerKey(project_id, trigger_id)
        if key in self.triggers:
            raise ValueError(f"trigger {project_id}/{trigger_id} exists; use republish")
        self.projects.setdefault(project_id, "active")
        self.triggers[key] = StoredTrigger(
            project_id=project_id,
            trigger_id=trigger_id,
            revision=1,
            cron=cron,
            timezone=timezone,
            misfire_policy=misfire_policy,
            misfire_grace_ms=misfire_grace_ms,
            enabled=enabled,
            task_id=task_id,
            jitter_ms=jitter_ms,
            task_revision=1,
            execution_revision_id=uuid.uuid4(),
        )
        self.schedules[key] = StoredSchedule(trigger_revision=1, updated_at_ms=self._now_ms())

    def republish(self, project_id: str, trigger_id: str, **changes: object) -> None:
        """A new revision: cursor and claim cleared, state and claim versions incremented."""
        key = TriggerKey(project_id, trigger_id)
        trigger = dataclasses.replace(self.triggers[key], **changes)  # type: ignore[arg-type]
        trigger.revision += 1
        self.triggers[key] = trigger
        row = self.schedules[key]
        row.trigger_revision = trigger.revision
        row.next_fire_at_ms = None
        row.clear_claim()
        row.state_version += 1
        row.claim_version += 1
        row.updated_at_ms = max(row.updated_at_ms, self._now_ms())

    def archive_project(self, project_id: str) -> None:
        self.projects[project_id] = "archived"

    def corrupt_execution(self, project_id: str, trigger_id: str) -> None:
        """Make the pinned execution revision's digest fail to verify (fail-closed path)."""
        self.triggers[TriggerKey(project_id, trigger_id)].execution_digest_ok = False

    def pause(self, project_id: str, trigger_id: str) -> None:
        """Pause a row: not claimable, any claim on it void (state and claim versions up)."""
        key = TriggerKey(project_id, trigger_id)
        self.paused.add(key)
        row = self.schedules[key]
        row.clear_claim()
        row.state_version += 1
        row.claim_version += 1
        row.updated_at_ms = max(row.updated_at_ms, self._now_ms())

    def resume(self, project_id: str, trigger_id: str) -> None:
        """Resume with ``skip``: the cursor from ``core.pause.plan_resume`` at now."""
        key = TriggerKey(project_id, trigger_id)
        self.paused.discard(key)
        row, trigger = self.schedules[key], self.triggers[key]
        now = self._now_ms()
        plan = plan_resume(
            parse_cron(trigger.cron, trigger.timezone),
            cursor_ms=row.next_fire_at_ms,
            since_ms=row.updated_at_ms,
            now_ms=now,
            catch_up="skip",
        )
        row.next_fire_at_ms = plan.next_fire_at_ms
        row.state_version += 1
        row.updated_at_ms = max(row.updated_at_ms, now)

    def set_cursor(self, project_id: str, trigger_id: str, next_fire_at_ms: int | None) -> None:
        self.schedules[TriggerKey(project_id, trigger_id)].next_fire_at_ms = next_fire_at_ms

    def expire_claim(self, project_id: str, trigger_id: str) -> None:
        row = self.schedules[TriggerKey(project_id, trigger_id)]
        row.claim_expires_at_ms = self._now_ms() - 1

    def schedule(self, project_id: str, trigger_id: str) -> StoredSchedule:
        """A copy of the schedule row."""
        return dataclasses.replace(self.schedules[TriggerKey(project_id, trigger_id)])

    def attempts_of(self, run_id: uuid.UUID) -> list[StoredAttempt]:
        return [a for a in self.attempts if a.run_id == run_id]

    def events_of(self, run_id: uuid.UUID) -> list[StoredEvent]:
        return [e for e in self.events if e.run_id == run_id]

    # --- ScheduleStore --------------------------------------------------------------------

    async def claim(self, owner: str, limit: int, lease_ms: int) -> list[Claim]:
        await self._enter("claim", limit)
        now = self._now_ms()
        due = [
            key
            for key, row in self.schedules.items()
            if self._active(key)
            and ((due := self._due_ms(key)) is None or due <= now)
            and (row.claim_token is None or (row.claim_expires_at_ms or 0) <= now)
        ]
        due.sort(
            key=lambda k: (
                self._due_ms(k) is not None,
                self._due_ms(k) or 0,
                k.project_id,
                k.trigger_id,
            )
        )
        claims = []
        for key in due[: max(limit, 0)]:
            row = self.schedules[key]
            trigger = self.triggers[key]
            row.claim_owner = owner
            row.claim_token = uuid.uuid4()
            row.claim_version += 1
            row.claim_expires_at_ms = now + lease_ms
            row.state_version += 1
            row.updated_at_ms = max(row.updated_at_ms, now)
            claims.append(
                Claim(
                    project_id=key.project_id,
                    trigger_id=key.trigger_id,
                    trigger_revision=row.trigger_revision,
                    state_version=row.state_version,
                    fence=ClaimFence(
                        owner=owner,
                        token=row.claim_token,
                        version=row.claim_version,
                        expires_at_ms=row.claim_expires_at_ms,
                    ),
                    cursor_ms=row.next_fire_at_ms,
                    claimed_at_ms=now,
                    cron=trigger.cron,
                    timezone=trigger.timezone,
                    misfire_policy=trigger.misfire_policy,
                    misfire_grace_ms=trigger.misfire_grace_ms,
                    trigger_digest=trigger.digest,
                    task_id=trigger.task_id,
                    task_revision=trigger.task_revision,
                    execution_revision_id=trigger.execution_revision_id,
                    jitter_ms=trigger.jitter_ms,
                )
            )
        return claims

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        await self._enter("admit", len(fires))
        return [self._admit_one(fire) for fire in fires]

    async def initialize(self, claim: Claim, decision: Initialize) -> Outcome:
        await self._enter("initialize", 1)
        now = self._now_ms()
        row, refused = self._check(claim, now, claim.cursor_ms)
        if refused is not None:
            return refused
        assert row is not None
        row.next_fire_at_ms = decision.next_ms
        self._written(row, now)
        return Initialized(claim.project_id, claim.trigger_id, next_ms=decision.next_ms)

    async def skip(self, claim: Claim, decision: Skip) -> Outcome:
        await self._enter("skip", 1)
        now = self._now_ms()
        row, refused = self._check(claim, now, claim.cursor_ms)
        if refused is not None:
            return refused
        assert row is not None
        row.next_fire_at_ms = decision.next_ms
        row.skipped_total += decision.skipped
        self._written(row, now)
        return Skipped(
            claim.project_id, claim.trigger_id, next_ms=decision.next_ms, skipped=decision.skipped
        )

    async def release(self, claim: Claim) -> Outcome:
        await self._enter("release", 1)
        now = self._now_ms()
        row, refused = self._check(claim, now, claim.cursor_ms)
        if refused is not None:
            return refused
        assert row is not None
        self._written(row, now)
        return Released(claim.project_id, claim.trigger_id)

    # --- ScheduleReader -------------------------------------------------------------------

    async def due_backlog(self) -> int:
        await self._enter("due_backlog", 0)
        now = self._now_ms()
        return sum(
            1
            for key, row in self.schedules.items()
            if self._active(key) and ((due := self._due_ms(key)) is None or due <= now)
        )

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        await self._enter("list_schedules", limit)
        return self._views(sorted(self.schedules)[: max(limit, 0)])

    async def list_schedules_after(
        self, after: tuple[str, str], limit: int = 1000
    ) -> list[ScheduleView]:
        await self._enter("list_schedules_after", limit)
        keys = [k for k in sorted(self.schedules) if (k.project_id, k.trigger_id) > after]
        return self._views(keys[: max(limit, 0)])

    def _views(self, keys: list[TriggerKey]) -> list[ScheduleView]:
        now = self._now_ms()
        views = []
        for key in keys:
            row = self.schedules[key]
            trigger = self.triggers[key]
            views.append(
                ScheduleView(
                    project_id=key.project_id,
                    trigger_id=key.trigger_id,
                    trigger_revision=row.trigger_revision,
                    active=self._active(key),
                    cron=trigger.cron,
                    timezone=trigger.timezone,
                    next_fire_at_ms=row.next_fire_at_ms,
                    last_scheduled_at_ms=row.last_scheduled_at_ms,
                    claim_owner=row.claim_owner,
                    claim_expires_at_ms=row.claim_expires_at_ms,
                    skipped_total=row.skipped_total,
                    coalesced_total=row.coalesced_total,
                    now_ms=now,
                )
            )
        return views

    # --- internals ------------------------------------------------------------------------

    def _due_ms(self, key: TriggerKey) -> int | None:
        """The row's due time, as PostgreSQL's generated ``due_at_ms`` computes it."""
        row, trigger = self.schedules[key], self.triggers[key]
        if row.next_fire_at_ms is None:
            return None
        return row.next_fire_at_ms + jitter_offset_ms(
            key.project_id,
            key.trigger_id,
            row.trigger_revision,
            row.next_fire_at_ms,
            trigger.jitter_ms,
        )

    async def _enter(self, method: str, size: int) -> None:
        self.calls.append((method, size))
        if self.hook is not None:
            await self.hook(method)
        await trio.lowlevel.checkpoint()

    def _active(self, key: TriggerKey) -> bool:
        trigger = self.triggers[key]
        return (
            self.projects.get(key.project_id) == "active"
            and trigger.enabled
            and self.schedules[key].trigger_revision == trigger.revision
            and key not in self.paused
        )

    def _check(
        self, claim: Claim, now: int, cursor_ms: int | None
    ) -> tuple[StoredSchedule | None, Outcome | None]:
        """The adapter's order: trigger revision, owner, token, version, expiry, state, cursor."""
        p, t = claim.project_id, claim.trigger_id
        row = self.schedules.get(claim.key)
        if row is None:
            return None, FenceLost(p, t, part="missing")
        fence = claim.fence
        if row.trigger_revision != claim.trigger_revision:
            return row, RevisionChanged(p, t, part="trigger")
        if row.claim_owner != fence.owner:
            return row, FenceLost(p, t, part="owner")
        if row.claim_token != fence.token:
            return row, FenceLost(p, t, part="token")
        if row.claim_version != fence.version:
            return row, FenceLost(p, t, part="version")
        if row.claim_expires_at_ms is None or row.claim_expires_at_ms <= now:
            return row, FenceLost(p, t, part="expiry")
        if row.state_version != claim.state_version:
            return row, FenceLost(p, t, part="state")
        if row.next_fire_at_ms != cursor_ms:
            return row, RevisionChanged(p, t, part="cursor")
        return row, None

    def _written(self, row: StoredSchedule, now: int) -> None:
        row.state_version += 1
        row.clear_claim()
        row.updated_at_ms = max(row.updated_at_ms, now)

    def _admit_one(self, fire: FireRequest) -> Outcome:
        """One occurrence, all or nothing (the batch's per-row atomicity)."""
        claim = fire.claim
        p, t = claim.project_id, claim.trigger_id
        now = self._now_ms()
        row, refused = self._check(claim, now, fire.scheduled_for_ms)
        if refused is not None:
            return refused
        assert row is not None
        trigger = self.triggers[claim.key]
        project_state = self.projects.get(p)
        if project_state is None:
            return Inactive(p, t, reason="project_missing")
        if project_state != "active":
            return Inactive(p, t, reason="project_archived")
        if (
            trigger.revision != claim.trigger_revision
            or trigger.digest != claim.trigger_digest
            or trigger.task_revision != claim.task_revision
            or trigger.execution_revision_id != claim.execution_revision_id
        ):
            return RevisionChanged(p, t, part="trigger")
        if not trigger.enabled:
            return Inactive(p, t, reason="trigger_disabled")
        if not trigger.execution_digest_ok:
            return DigestInvalid(p, t, part="execution")
        if fire.idempotency_key in self.runs:
            return StoreFailed(p, t, sqlstate="23505", exception="UniqueViolationError")
        fence = claim.fence
        self.runs[fire.idempotency_key] = StoredRun(
            run_id=fire.run_id,
            project_id=p,
            trigger_id=t,
            trigger_revision=claim.trigger_revision,
            task_id=claim.task_id,
            task_revision=claim.task_revision,
            execution_revision_id=claim.execution_revision_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            queued_at_ms=now,
            admitted_by_owner=fence.owner,
            admitted_claim_token=fence.token,
            admitted_claim_version=fence.version,
        )
        self.attempts.append(StoredAttempt(attempt_id=fire.attempt_id, run_id=fire.run_id))
        self.events.append(StoredEvent(fire.run_id, 1, "run.created", now))
        self.events.append(StoredEvent(fire.run_id, 2, "run.queued", now))
        row.next_fire_at_ms = fire.next_ms
        row.last_scheduled_at_ms = fire.scheduled_for_ms
        row.coalesced_total += fire.coalesced
        self._written(row, now)
        return Admitted(
            p,
            t,
            run_id=fire.run_id,
            attempt_id=fire.attempt_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=now,
        )
