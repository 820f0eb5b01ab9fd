"""The conformance harness over the PostgreSQL adapter, on a fresh database per test.

Triggers are published through the real publisher as the admin role; the store runs as the
runtime role over its two pools (claims READ COMMITTED, admits SERIALIZABLE); the reader
is the HTTP one's, over the claim pool. Only the test-side moves (cursor, claim expiry) use
the superuser, since no role may make them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.cluster.runs_pass import RunsPass
from qlsched.core.config import Config
from qlsched.core.control import TriggerRef
from qlsched.core.requests import RecordResult, RequestOverlap
from qlsched.core.specs import PublishFile
from qlsched.postgres import control
from qlsched.postgres.pool import Connection, Database, connect_once, open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.reader import PostgresReader
from qlsched.postgres.requests import PostgresRequestStore, record_backfill, record_trigger_now
from qlsched.postgres.store import PostgresStore
from tests.conformance.harness import (
    PublishingHarness,
    RequestRow,
    RunRow,
    RunState,
    ScheduleRow,
)
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase


class PgHarness(PublishingHarness):
    leases = True

    def __init__(
        self, db: TestDatabase, claim_db: Database, admit_db: Database, reader: PostgresReader
    ) -> None:
        super().__init__()
        self.db = db
        self._pools = (claim_db, admit_db)
        self._store = PostgresStore(claim_db, admit_db)
        self._reader = reader

    @property
    def store(self) -> PostgresStore:
        return self._store

    @property
    def reader(self) -> PostgresReader:
        return self._reader

    async def _publish_file(self, spec: PublishFile) -> None:
        await connect_once(self.db.admin_dsn, lambda conn: publish(conn, spec))

    async def _su(self, sql: str, *args: Any) -> Any:
        async def fn(conn: Connection) -> Any:
            return await conn.fetch(sql, *args)

        return await connect_once(self.db.superuser_dsn, fn)

    async def pause(self, project_id: str, trigger_id: str) -> None:
        ref = TriggerRef(project_id, trigger_id)
        await connect_once(
            self.db.admin_dsn, lambda conn: control.pause(conn, ref, note=None, actor=None)
        )

    async def resume(self, project_id: str, trigger_id: str) -> None:
        ref = TriggerRef(project_id, trigger_id)
        await connect_once(
            self.db.admin_dsn, lambda conn: control.resume(conn, ref, catch_up="skip", actor=None)
        )

    async def now_ms(self) -> int:
        rows = await self._su("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint AS ms")
        return int(rows[0]["ms"])

    async def set_cursor(
        self, project_id: str, trigger_id: str, next_fire_at_ms: int | None
    ) -> None:
        await self._su(
            "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $3"
            " WHERE project_id = $1 AND trigger_id = $2",
            project_id,
            trigger_id,
            next_fire_at_ms,
        )

    async def expire_claim(self, project_id: str, trigger_id: str) -> None:
        await self._su(
            "UPDATE qlsched.trigger_schedules SET claim_expires_at_ms ="
            " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1"
            " WHERE project_id = $1 AND trigger_id = $2 AND claim_token IS NOT NULL",
            project_id,
            trigger_id,
        )

    async def schedule(self, project_id: str, trigger_id: str) -> ScheduleRow:
        rows = await self._su(
            "SELECT trigger_revision, next_fire_at_ms, last_scheduled_at_ms, state_version,"
            " claim_owner, claim_token, claim_version, claim_expires_at_ms, skipped_total,"
            " coalesced_total FROM qlsched.trigger_schedules"
            " WHERE project_id = $1 AND trigger_id = $2",
            project_id,
            trigger_id,
        )
        return ScheduleRow(**dict(rows[0]))

    @property
    def request_store(self) -> PostgresRequestStore:
        return PostgresRequestStore(*self._pools)

    async def record_trigger_now(self, project_id: str, trigger_id: str) -> RecordResult:
        return await connect_once(
            self.db.admin_dsn, lambda conn: record_trigger_now(conn, project_id, trigger_id)
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
        return await connect_once(
            self.db.admin_dsn,
            lambda conn: record_backfill(
                conn,
                project_id,
                trigger_id,
                from_ms=from_ms,
                to_ms=to_ms,
                max_occurrences=max_occurrences,
                overlap=overlap,
            ),
        )

    async def serve_requests(self, budget: int) -> None:
        config = Config(owner="r1", claim_budget=budget)
        await RequestsPass(
            self.request_store, config, MemorySink(), Metrics(), budget=budget, poll_s=0
        ).run()

    async def requests(self) -> list[RequestRow]:
        rows = await self._su(
            "SELECT request_id, kind, state, admitted::int, already_admitted::int,"
            " refused_reason, failures, overlap_skipped::int FROM qlsched.control_requests"
            " ORDER BY created_at_ms, request_id"
        )
        return [RequestRow(*r.values()) for r in rows]

    async def break_run_inserts(self, trigger_id: str) -> None:
        await self._su(
            "CREATE FUNCTION public.refuse_run() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN RAISE EXCEPTION 'refused by the test'; END$$"
        )
        await self._su(
            "CREATE TRIGGER refuse_run BEFORE INSERT ON qlsched.runs FOR EACH ROW"
            f" WHEN (NEW.trigger_id = '{trigger_id}') EXECUTE FUNCTION public.refuse_run()"
        )

    async def move_run(self, trigger_id: str, scheduled_for_ms: int, state: str) -> None:
        await self._su(
            "UPDATE qlsched.runs SET state = $3,"
            " started_at_ms = CASE WHEN $3 = 'running'"
            "   THEN (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
            "   ELSE started_at_ms END,"
            " finished_at_ms = CASE WHEN $3 = 'running' THEN NULL"
            "   ELSE (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint END"
            " WHERE trigger_id = $1 AND scheduled_for_ms = $2",
            trigger_id,
            scheduled_for_ms,
            state,
        )

    async def run_states(self, trigger_id: str) -> list[RunState]:
        rows = await self._su(
            "SELECT r.scheduled_for_ms, r.state, r.cancel_reason, r.cancel_requested,"
            " ARRAY(SELECT e.type FROM qlsched.run_events e WHERE e.run_id = r.run_id"
            "       ORDER BY e.seq) AS events"
            " FROM qlsched.runs r WHERE r.trigger_id = $1 ORDER BY r.scheduled_for_ms",
            trigger_id,
        )
        return [RunState(**dict(r)) for r in rows]

    async def runs_pass(self) -> None:
        claim_db = self._pools[0]
        # A new pass looks at once (its poll timer starts due).
        await RunsPass(claim_db, Config(owner="r1"), MemorySink(), Metrics()).run()

    async def overlap_totals(self, project_id: str, trigger_id: str) -> tuple[int, int]:
        [row] = await self._su(
            "SELECT overlap_skipped_total::int, deadline_cancelled_total::int"
            " FROM qlsched.trigger_schedules WHERE project_id = $1 AND trigger_id = $2",
            project_id,
            trigger_id,
        )
        return int(row[0]), int(row[1])

    async def runs(self) -> list[RunRow]:
        rows = await self._su(
            "SELECT r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,"
            " r.idempotency_key,"
            " (SELECT count(*) FROM qlsched.attempts a WHERE a.run_id = r.run_id)::int"
            "   AS attempts,"
            " (SELECT count(*) FROM qlsched.run_events e WHERE e.run_id = r.run_id)::int"
            "   AS events,"
            " r.admitted_by_owner, r.admitted_claim_token, r.admitted_claim_version"
            " FROM qlsched.runs r ORDER BY r.project_id, r.trigger_id, r.scheduled_for_ms"
        )
        return [RunRow(**dict(r)) for r in rows]


@asynccontextmanager
async def open_pg_harness(request: pytest.FixtureRequest) -> AsyncIterator[PgHarness]:
    db: TestDatabase = request.getfixturevalue("pg_db")
    async with AsyncExitStack() as stack:
        claim_db = await stack.enter_async_context(open_database(db.runtime_dsn))
        admit_db = await stack.enter_async_context(
            open_database(db.runtime_dsn, isolation="serializable")
        )
        yield PgHarness(db, claim_db, admit_db, PostgresReader(claim_db))
