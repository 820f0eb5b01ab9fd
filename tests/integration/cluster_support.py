"""Shared pieces of the cluster-control integration tests (real PostgreSQL, ``pg_db``).

Triggers are published through the real publisher as the admin role; the replicas run as the
runtime role. Only the test-side moves use the superuser (no role may make them): putting a
cursor into the past so an occurrence is due, shortening or expiring a claim, reading
``pg_stat_activity`` and killing backends. Every time is the database's own.

The cron of the published triggers is yearly, so an occurrence is due only when a test moves
the cursor (``make_due``): exactly the occurrences a test asks for, never one by accident.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import msgspec
import trio

from qlsched.core.config import Config
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.pool import Connection, Database, connect_once, open_database
from qlsched.postgres.publish import publish
from tests.support.pg import TestDatabase

PROJECT: Final = "p"
YEARLY: Final = "0 0 1 1 *"
"""Never due in a test's lifetime unless a test moves the cursor."""
RUNTIME: Final = "qlsched_runtime"
SU_APPLICATION: Final = "qlsched-test-su"


def spec_of(triggers: Sequence[TriggerEntry]) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id=PROJECT)],
        tasks=[TaskEntry(project=PROJECT, id="task", command="true")],
        triggers=list(triggers),
    )


def trigger(trigger_id: str, *, cron: str = YEARLY, misfire: str = "skip") -> TriggerEntry:
    return TriggerEntry(
        project=PROJECT,
        id=trigger_id,
        task="task",
        cron=cron,
        misfire=misfire,  # type: ignore[arg-type]
        misfire_grace_ms=60_000,
    )


async def publish_triggers(db: TestDatabase, triggers: Sequence[TriggerEntry]) -> None:
    """Publish as the admin role through the real publisher (cursors NULL: uninitialised)."""
    spec = spec_of(triggers)
    await connect_once(db.admin_dsn, lambda conn: publish(conn, spec))


def control_config(dsn: str, owner: str, **overrides: Any) -> Config:
    """A replica's config that readiness accepts on the test server (runtime timeouts 5 s,
    so the lease must be above them) and that turns rounds over quickly."""
    values: dict[str, Any] = {
        "dsn": dsn,
        "owner": owner,
        "lease_ms": 6_000,
        "cadence_ms": 50,
        "stop_timeout_ms": 2_000,
    }
    values.update(overrides)
    return Config(**values)


class Occurrence(msgspec.Struct, frozen=True):
    """What one occurrence left in the database: its Runs, Attempts and events."""

    runs: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    events: list[tuple[int, str]]


ATTEMPT_DRIFT_FIELDS: Final = (
    "worker_id",
    "session_id",
    "lease_id",
    "offer_id",
    "callback_token",
    "started_at_ms",
    "result",
    "error",
)


class Superuser:
    """The test's superuser hands on one database (its own small pool)."""

    def __init__(self, db: Database, name: str) -> None:
        self.db = db
        self.name = name

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        async def fn(conn: Connection) -> list[dict[str, Any]]:
            return [dict(r) for r in await conn.fetch(sql, *args)]

        return await self.db.run(fn)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        async def fn(conn: Connection) -> Any:
            return await conn.fetchval(sql, *args)

        return await self.db.run(fn)

    async def execute(self, sql: str, *args: Any) -> str:
        async def fn(conn: Connection) -> str:
            return await conn.execute(sql, *args)

        return await self.db.run(fn)

    async def now_ms(self) -> int:
        return int(
            await self.fetchval("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint")
        )

    async def make_due(self, trigger_ids: Sequence[str], *, ago_ms: int = 100) -> int:
        """Put the cursors ``ago_ms`` into the database's past (within the misfire grace: a
        Fire); return that cursor, the occurrence's ``scheduled_for``."""
        cursor = await self.now_ms() - ago_ms
        await self.execute(
            "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $2"
            " WHERE project_id = $1 AND trigger_id = ANY($3::text[])",
            PROJECT,
            cursor,
            list(trigger_ids),
        )
        return cursor

    async def wait_initialised(self, trigger_ids: Sequence[str]) -> None:
        """Wait until a replica has initialised the rows. Moving a cursor before that would
        race the initialisation: its fence (the cursor it saw) refuses the write and the
        claim is left to expire, a whole lease later."""

        async def probe() -> bool:
            rows = await self.schedules()
            return all(rows[i]["next_fire_at_ms"] is not None for i in trigger_ids)

        await wait_until(probe, what=f"{list(trigger_ids)} initialised")

    async def expire_claims(self) -> int:
        """Move every live claim's expiry 1 ms into the database's past."""
        status = await self.execute(
            "UPDATE qlsched.trigger_schedules SET claim_expires_at_ms ="
            " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - 1"
            " WHERE claim_token IS NOT NULL"
        )
        return int(status.split()[-1])

    async def schedule(self, trigger_id: str) -> dict[str, Any]:
        rows = await self.fetch(
            "SELECT * FROM qlsched.trigger_schedules WHERE project_id = $1 AND trigger_id = $2",
            PROJECT,
            trigger_id,
        )
        return rows[0]

    async def schedules(self) -> dict[str, dict[str, Any]]:
        rows = await self.fetch("SELECT * FROM qlsched.trigger_schedules ORDER BY trigger_id")
        return {r["trigger_id"]: r for r in rows}

    async def occurrence(self, trigger_id: str, scheduled_for_ms: int) -> Occurrence:
        runs = await self.fetch(
            "SELECT * FROM qlsched.runs WHERE project_id = $1 AND trigger_id = $2"
            " AND scheduled_for_ms = $3",
            PROJECT,
            trigger_id,
            scheduled_for_ms,
        )
        ids = [r["run_id"] for r in runs]
        attempts = await self.fetch(
            "SELECT * FROM qlsched.attempts WHERE run_id = ANY($1::uuid[])", ids
        )
        events = await self.fetch(
            "SELECT seq, type FROM qlsched.run_events WHERE run_id = ANY($1::uuid[]) ORDER BY seq",
            ids,
        )
        return Occurrence(runs, attempts, [(e["seq"], e["type"]) for e in events])

    async def run_count(self) -> int:
        return int(await self.fetchval("SELECT count(*) FROM qlsched.runs"))

    async def runtime_backends(self) -> list[dict[str, Any]]:
        """The runtime role's backends on this database (the replicas' pools)."""
        return await self.fetch(
            "SELECT pid, application_name, state, backend_xid::text AS xid"
            " FROM pg_stat_activity WHERE datname = $1 AND usename = $2 ORDER BY pid",
            self.name,
            RUNTIME,
        )

    async def busy_runtime_backends(self) -> list[dict[str, Any]]:
        """Runtime backends that are not plain idle: active, or idle in a transaction."""
        return [b for b in await self.runtime_backends() if b["state"] != "idle"]

    async def terminate_idle_runtime_backends(self) -> list[tuple[int, str]]:
        """Kill the runtime's idle backends; return (pid, application_name) of each."""
        rows = await self.fetch(
            "SELECT pid, application_name, pg_terminate_backend(pid) AS ok"
            " FROM pg_stat_activity WHERE datname = $1 AND usename = $2 AND state = 'idle'",
            self.name,
            RUNTIME,
        )
        return [(r["pid"], r["application_name"]) for r in rows if r["ok"]]


@asynccontextmanager
async def open_superuser(db: TestDatabase) -> AsyncIterator[Superuser]:
    async with open_database(
        db.superuser_dsn, max_size=2, application_name=SU_APPLICATION
    ) as su_db:
        yield Superuser(su_db, db.name)


def assert_exactly_once(occ: Occurrence, *, owner: str | None = None) -> None:
    """Exactly one queued Run, its one pristine ``claimed`` Attempt and the two events."""
    assert len(occ.runs) == 1, f"{len(occ.runs)} Runs for one occurrence"
    run = occ.runs[0]
    assert run["state"] == "queued"
    assert run["owner"] == "runtime"
    assert not run["cancel_requested"]
    assert run["queued_at_ms"] is not None
    if owner is not None:
        assert run["admitted_by_owner"] == owner
    assert len(occ.attempts) == 1, f"{len(occ.attempts)} Attempts for one Run"
    attempt = occ.attempts[0]
    assert attempt["attempt_no"] == 1
    assert attempt["state"] == "claimed"
    assert attempt["executor_kind"] == "remote_worker"
    drift = {f: attempt[f] for f in ATTEMPT_DRIFT_FIELDS if attempt[f] is not None}
    assert not drift, f"admitted Attempt is not pristine: {sorted(drift)}"
    assert occ.events == [(1, "run.created"), (2, "run.queued")]


def assert_nothing_or_exactly_once(occ: Occurrence) -> None:
    """All or nothing: no trace of the occurrence, or its whole admission."""
    if occ.runs or occ.attempts or occ.events:
        assert_exactly_once(occ)


async def wait_until(
    probe: Callable[[], Awaitable[bool]], *, timeout_s: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``probe`` every 20 ms; fail the test after ``timeout_s``."""
    with trio.move_on_after(timeout_s):
        while True:
            if await probe():
                return
            await trio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class HttpResponse(msgspec.Struct, frozen=True):
    status: int
    body: bytes


async def http_get(port: int, path: str, *, timeout_s: float = 5.0) -> HttpResponse:
    """A raw HTTP/1.1 GET (``Connection: close``, read to EOF).

    Raises:
        ConnectionError: the connection was refused, or closed before any response.
    """
    with trio.fail_after(timeout_s):
        try:
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(
                    f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode()
                )
                data = bytearray()
                while chunk := await stream.receive_some():
                    data += chunk
        except trio.BrokenResourceError as exc:
            raise ConnectionError(f"GET {path}: connection broken") from exc
    if not data:
        raise ConnectionError(f"GET {path}: closed without a response")
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status_line = head.decode("latin-1").split("\r\n")[0]
    return HttpResponse(int(status_line.split(" ")[1]), body)


async def http_status(port: int, path: str = "/readyz") -> int | None:
    """The status of a GET, or None when the listener refuses or drops the connection."""
    try:
        return (await http_get(port, path)).status
    except OSError:  # ConnectionRefusedError, ConnectionError
        return None
