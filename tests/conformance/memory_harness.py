"""The conformance harness over the in-memory store (wall-clock time, like a database)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.conformance.harness import RunRow, ScheduleRow
from tests.support.memory_store import MemoryStore


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class MemoryHarness:
    leases = True

    def __init__(self) -> None:
        self._memory = MemoryStore(wall_clock_ms)

    @property
    def store(self) -> MemoryStore:
        return self._memory

    @property
    def reader(self) -> MemoryStore:
        return self._memory

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
    ) -> None:
        self._memory.add_trigger(
            project_id,
            trigger_id,
            cron,
            timezone=timezone,
            misfire_policy=misfire_policy,
            misfire_grace_ms=misfire_grace_ms,
            enabled=enabled,
            jitter_ms=jitter_ms,
        )

    async def pause(self, project_id: str, trigger_id: str) -> None:
        self._memory.pause(project_id, trigger_id)

    async def resume(self, project_id: str, trigger_id: str) -> None:
        self._memory.resume(project_id, trigger_id)

    async def republish(self, project_id: str, trigger_id: str, cron: str) -> None:
        self._memory.republish(project_id, trigger_id, cron=cron)

    async def now_ms(self) -> int:
        return wall_clock_ms()

    async def set_cursor(
        self, project_id: str, trigger_id: str, next_fire_at_ms: int | None
    ) -> None:
        self._memory.set_cursor(project_id, trigger_id, next_fire_at_ms)

    async def expire_claim(self, project_id: str, trigger_id: str) -> None:
        self._memory.expire_claim(project_id, trigger_id)

    async def schedule(self, project_id: str, trigger_id: str) -> ScheduleRow:
        row = self._memory.schedule(project_id, trigger_id)
        return ScheduleRow(
            trigger_revision=row.trigger_revision,
            next_fire_at_ms=row.next_fire_at_ms,
            last_scheduled_at_ms=row.last_scheduled_at_ms,
            state_version=row.state_version,
            claim_owner=row.claim_owner,
            claim_token=row.claim_token,
            claim_version=row.claim_version,
            claim_expires_at_ms=row.claim_expires_at_ms,
            skipped_total=row.skipped_total,
            coalesced_total=row.coalesced_total,
        )

    async def runs(self) -> list[RunRow]:
        memory = self._memory
        rows = [
            RunRow(
                project_id=run.project_id,
                trigger_id=run.trigger_id,
                trigger_revision=run.trigger_revision,
                scheduled_for_ms=run.scheduled_for_ms,
                idempotency_key=run.idempotency_key,
                attempts=len(memory.attempts_of(run.run_id)),
                events=len(memory.events_of(run.run_id)),
                admitted_by_owner=run.admitted_by_owner,
                admitted_claim_token=run.admitted_claim_token,
                admitted_claim_version=run.admitted_claim_version,
            )
            for run in memory.runs.values()
        ]
        return sorted(rows, key=lambda r: (r.project_id, r.trigger_id, r.scheduled_for_ms))


@asynccontextmanager
async def open_memory_harness(request: pytest.FixtureRequest) -> AsyncIterator[MemoryHarness]:
    yield MemoryHarness()
