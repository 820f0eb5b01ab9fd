"""The conformance harness over the Edge store (``qlsched.sqlite``), on a fresh file per test.

Triggers go through the Edge publisher; the test-side move of a cursor is a direct UPDATE
on the file, as the PostgreSQL harness does it as superuser. Capability ``leases = False``:
an Edge claim is a read, so the suite checks the cursor compare-and-set where the other
stores are checked for their lease (see ``harness.StoreHarness.leases``).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from qlsched.core.control import TriggerRef
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.requests import RecordResult, RequestAsk, RequestOverlap
from qlsched.core.specs import PublishFile
from qlsched.edge.requests import EdgeRequests
from qlsched.edge.runs_pass import EdgeRunsPass
from qlsched.sqlite import control
from qlsched.sqlite.database import EdgeDatabase, open_checked
from qlsched.sqlite.publish import publish
from qlsched.sqlite.request_record import record_request
from qlsched.sqlite.requests import SqliteRequestStore
from qlsched.sqlite.store import SqliteStore
from qlsched.summary import SummaryCounts
from tests.conformance.harness import (
    PublishingHarness,
    RequestRow,
    RunRow,
    RunState,
    ScheduleRow,
)
from tests.support.memory_sink import MemorySink

RUNS = """
SELECT r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms, r.idempotency_key,
       (SELECT count(*) FROM attempts AS a WHERE a.run_id = r.run_id),
       (SELECT count(*) FROM run_events AS e WHERE e.run_id = r.run_id),
       r.admitted_by_owner, r.admitted_claim_token, r.admitted_claim_version
  FROM runs AS r ORDER BY r.project_id, r.trigger_id, r.scheduled_for_ms
"""
SCHEDULE = """
SELECT trigger_revision, next_fire_at_ms, last_scheduled_at_ms, state_version, skipped_total,
       coalesced_total
  FROM trigger_schedules WHERE project_id = ? AND trigger_id = ?
"""
SET_CURSOR = (
    "UPDATE trigger_schedules SET next_fire_at_ms = ?, due_at_ms = ?"
    " WHERE project_id = ? AND trigger_id = ?"
)
JITTER = """
SELECT s.trigger_revision, t.jitter_ms
  FROM trigger_schedules AS s
  JOIN triggers AS t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
 WHERE s.project_id = ? AND s.trigger_id = ?
"""


class SqliteHarness(PublishingHarness):
    leases = False

    def __init__(self, db: EdgeDatabase) -> None:
        super().__init__()
        self.db = db
        self._store = SqliteStore(db)

    @property
    def store(self) -> SqliteStore:
        return self._store

    @property
    def reader(self) -> SqliteStore:
        return self._store

    async def _publish_file(self, spec: PublishFile) -> None:
        await self.db.call(lambda conn: publish(conn, spec, self.db.clock()))

    async def pause(self, project_id: str, trigger_id: str) -> None:
        ref = TriggerRef(project_id, trigger_id)
        await self.db.call(
            lambda conn: control.pause(conn, ref, self.db.clock(), note=None, actor=None)
        )

    async def resume(self, project_id: str, trigger_id: str) -> None:
        ref = TriggerRef(project_id, trigger_id)
        await self.db.call(
            lambda conn: control.resume(conn, ref, self.db.clock(), catch_up="skip", actor=None)
        )

    async def now_ms(self) -> int:
        return self.db.clock()

    async def set_cursor(
        self, project_id: str, trigger_id: str, next_fire_at_ms: int | None
    ) -> None:
        def move(conn: sqlite3.Connection) -> None:
            revision, jitter = conn.execute(JITTER, (project_id, trigger_id)).fetchone()
            due = None
            if next_fire_at_ms is not None:
                due = next_fire_at_ms + jitter_offset_ms(
                    project_id, trigger_id, revision, next_fire_at_ms, jitter
                )
            conn.execute(SET_CURSOR, (next_fire_at_ms, due, project_id, trigger_id))

        await self.db.call(move)

    async def expire_claim(self, project_id: str, trigger_id: str) -> None:
        """Nothing to expire: an Edge claim is a read and leaves no lease in the row."""

    async def schedule(self, project_id: str, trigger_id: str) -> ScheduleRow:
        def read(conn: sqlite3.Connection) -> ScheduleRow:
            r = conn.execute(SCHEDULE, (project_id, trigger_id)).fetchone()
            return ScheduleRow(
                trigger_revision=r[0],
                next_fire_at_ms=r[1],
                last_scheduled_at_ms=r[2],
                state_version=r[3],
                claim_owner=None,
                claim_token=None,
                claim_version=0,
                claim_expires_at_ms=None,
                skipped_total=r[4],
                coalesced_total=r[5],
            )

        return await self.db.call(read)

    @property
    def request_store(self) -> SqliteRequestStore:
        return SqliteRequestStore(self.db)

    async def record_trigger_now(self, project_id: str, trigger_id: str) -> RecordResult:
        ref = TriggerRef(project_id, trigger_id)
        return await self.db.call(
            lambda conn: record_request(conn, ref, self.db.clock(), RequestAsk(kind="trigger"))
        )

    async def record_backfill(
        self,
        project_id: str,
        trigger_id: str,
        from_ms: int,
        to_ms: int,
        max_occurrences: int = 10_000,
        overlap: RequestOverlap | None = None,
    ) -> RecordResult:
        ref = TriggerRef(project_id, trigger_id)
        return await self.db.call(
            lambda conn: record_request(
                conn,
                ref,
                self.db.clock(),
                RequestAsk(
                    kind="backfill",
                    span=(from_ms, to_ms),
                    max_occurrences=max_occurrences,
                    overlap=overlap,
                ),
            )
        )

    async def serve_requests(self, budget: int) -> None:
        await EdgeRequests(
            self.request_store,
            owner="r1",
            budget=budget,
            sink=MemorySink(),
            metrics=SummaryCounts(),
        ).run()

    async def requests(self) -> list[RequestRow]:
        def read(conn: sqlite3.Connection) -> list[RequestRow]:
            return [
                RequestRow(uuid.UUID(r[0]), *r[1:])
                for r in conn.execute(
                    "SELECT request_id, kind, state, admitted, already_admitted,"
                    " refused_reason, failures, overlap_skipped FROM control_requests"
                    " ORDER BY created_at_ms, request_id"
                )
            ]

        return await self.db.call(read)

    async def break_run_inserts(self, trigger_id: str) -> None:
        def create(conn: sqlite3.Connection) -> None:
            conn.execute(
                "CREATE TRIGGER refuse_run BEFORE INSERT ON runs"
                f" WHEN NEW.trigger_id = '{trigger_id}'"
                " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )

        await self.db.call(create)

    async def move_run(self, trigger_id: str, scheduled_for_ms: int, state: str) -> None:
        now = self.db.clock()
        started = now if state == "running" else None
        finished = None if state == "running" else now

        def move(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET state = ?, started_at_ms = coalesce(?, started_at_ms),"
                " finished_at_ms = ? WHERE trigger_id = ? AND scheduled_for_ms = ?",
                (state, started, finished, trigger_id, scheduled_for_ms),
            )

        await self.db.call(move)

    async def run_states(self, trigger_id: str) -> list[RunState]:
        def read(conn: sqlite3.Connection) -> list[RunState]:
            return [
                RunState(
                    scheduled_for_ms=r[0],
                    state=r[1],
                    cancel_reason=r[2],
                    cancel_requested=bool(r[3]),
                    events=[
                        str(e[0])
                        for e in conn.execute(
                            "SELECT type FROM run_events WHERE run_id = ? ORDER BY seq", (r[4],)
                        )
                    ],
                )
                for r in conn.execute(
                    "SELECT scheduled_for_ms, state, cancel_reason, cancel_requested, run_id"
                    " FROM runs WHERE trigger_id = ? ORDER BY scheduled_for_ms",
                    (trigger_id,),
                ).fetchall()
            ]

        return await self.db.call(read)

    async def runs_pass(self) -> None:
        await EdgeRunsPass(self.db, owner="r1", budget=16, metrics=SummaryCounts()).run()

    async def overlap_totals(self, project_id: str, trigger_id: str) -> tuple[int, int]:
        def read(conn: sqlite3.Connection) -> tuple[int, int]:
            row = conn.execute(
                "SELECT overlap_skipped_total, deadline_cancelled_total FROM trigger_schedules"
                " WHERE project_id = ? AND trigger_id = ?",
                (project_id, trigger_id),
            ).fetchone()
            return int(row[0]), int(row[1])

        return await self.db.call(read)

    async def runs(self) -> list[RunRow]:
        def read(conn: sqlite3.Connection) -> list[RunRow]:
            return [
                RunRow(
                    project_id=r[0],
                    trigger_id=r[1],
                    trigger_revision=r[2],
                    scheduled_for_ms=r[3],
                    idempotency_key=r[4],
                    attempts=r[5],
                    events=r[6],
                    admitted_by_owner=r[7],
                    admitted_claim_token=uuid.UUID(r[8]),
                    admitted_claim_version=r[9],
                )
                for r in conn.execute(RUNS)
            ]

        return await self.db.call(read)


@asynccontextmanager
async def open_sqlite_harness(request: pytest.FixtureRequest) -> AsyncIterator[SqliteHarness]:
    tmp_path: Path = request.getfixturevalue("tmp_path")
    path = str(tmp_path / "edge.sqlite3")
    db = await trio.to_thread.run_sync(lambda: open_checked(path, create=True, apply=True))
    try:
        yield SqliteHarness(db)
    finally:
        db.close()
