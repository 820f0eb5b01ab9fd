"""Jitter on the Edge profile (docs/contract.md §11): the same trigger field, stored beside
the DST policy, a due time written with every cursor write, and rounds that admit an
occurrence S at S + h (the hash of ``core.jitter``, as PostgreSQL computes it) under its own
key and scheduled time; an Edge file made before jitter opens with every due time at its
cursor.

The Edge clock is injected, so these rounds run at chosen instants around a due time.
"""

from __future__ import annotations

import io
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trio

from qlsched.commands.edge.status import render
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.keys import idempotency_key
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.edge.scheduler import EdgeScheduler, EdgeSettings
from qlsched.metrics import Metrics
from qlsched.sqlite.database import EdgeDatabase, open_checked
from qlsched.sqlite.publish import PublishResult, publish
from qlsched.sqlite.status import EdgeStatus, read_status
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import OLD_EXECUTION, clocked_edge, file_before, publish_file, qlsched, read
from tests.edge.test_edge_cli import one_line_error
from tests.support.memory_sink import MemorySink

HOUR_MS = 3_600_000
HOURLY = "0 * * * *"
START = int(datetime(2026, 3, 1, 9, 30, tzinfo=UTC).timestamp()) * 1000
TEN = int(datetime(2026, 3, 1, 10, 0, tzinfo=UTC).timestamp()) * 1000
JITTER_MS = 600_000


def spec_file(jitter_ms: int = JITTER_MS, command: str = "true") -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command=command)],
        triggers=[TriggerEntry(project="p", id="g", task="job", cron=HOURLY, jitter_ms=jitter_ms)],
    )


def h(scheduled_for_ms: int, revision: int = 1, jitter_ms: int = JITTER_MS) -> int:
    return jitter_offset_ms("p", "g", revision, scheduled_for_ms, jitter_ms)


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[EdgeDatabase, list[int]]]:
    async with clocked_edge(tmp_path, START) as opened:
        yield opened


async def _publish(
    db: EdgeDatabase, now: list[int], spec: PublishFile, *, prune: bool = False
) -> PublishResult:
    return await db.call(lambda conn: publish(conn, spec, now[0], prune=prune))


def schedule(db: EdgeDatabase) -> list[tuple[object, ...]]:
    return read(Path(db.path), "SELECT next_fire_at_ms, due_at_ms FROM trigger_schedules")


async def test_rounds_admit_an_occurrence_at_its_due_time(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """Rule: an initialized cursor S is due at S + h; a round one millisecond before admits
    nothing, a round at S + h admits S (scheduled_for S, the key of S), the next cursor
    carries its own due time, and the lag is 0 from the due time and h from S."""
    db, now = edge
    await _publish(db, now, spec_file())
    metrics = Metrics(profile="edge")
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink(), metrics)
    await scheduler.run_round()
    assert h(TEN) > 0
    assert schedule(db) == [(TEN, TEN + h(TEN))]

    now[0] = TEN + h(TEN) - 1
    await scheduler.run_round()
    assert read(Path(db.path), "SELECT count(*) FROM runs") == [(0,)]

    now[0] = TEN + h(TEN)
    await scheduler.run_round()
    runs = read(Path(db.path), "SELECT scheduled_for_ms, idempotency_key FROM runs")
    assert runs == [(TEN, idempotency_key("g", 1, TEN))]
    eleven = TEN + HOUR_MS
    assert schedule(db) == [(eleven, eleven + h(eleven))]
    edge = {"profile": "edge"}
    sample = metrics.registry.get_sample_value
    assert sample("qlsched_schedule_lag_seconds_sum", edge) == 0.0
    assert sample("qlsched_schedule_lag_from_scheduled_seconds_sum", edge) == h(TEN) / 1000


async def test_publish_round_trip_keeps_the_jitter(edge: tuple[EdgeDatabase, list[int]]) -> None:
    """Rule: an Edge publish stores ``jitter_ms``, the round's read hands it to the decision,
    another jitter is a new revision (cursor and due time cleared), the same file again
    changes nothing, and a re-pin and a prune keep it."""
    db, now = edge
    path = Path(db.path)
    assert (await _publish(db, now, spec_file())).triggers == {"p/g": "added"}
    [claim] = await SqliteStore(db).claim("edge", 1, 30_000)
    assert claim.jitter_ms == JITTER_MS
    await EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink()).run_round()
    assert schedule(db) == [(TEN, TEN + h(TEN))]

    assert (await _publish(db, now, spec_file(1_000))).triggers == {"p/g": "changed"}
    assert read(path, "SELECT revision, jitter_ms FROM triggers") == [(2, 1_000)]
    assert schedule(db) == [(None, None)]
    assert (await _publish(db, now, spec_file(1_000))).triggers == {"p/g": "unchanged"}

    task_changed = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command="false")],
    )
    assert (await _publish(db, now, task_changed)).triggers == {"p/g": "repinned"}
    assert (await _publish(db, now, task_changed, prune=True)).triggers == {"p/g": "disabled"}
    assert read(path, "SELECT revision, enabled, jitter_ms FROM triggers") == [(4, 0, 1_000)]


def test_jitter_not_below_the_period_is_bad_input(tmp_path: Path) -> None:
    """Rule: ``edge publish`` refuses a jitter at or above the trigger's shortest period in
    one line naming the trigger (exit 2), and creates nothing."""
    toml = publish_file(tmp_path / "t.toml", 1, cron="* * * * *")
    toml.write_text(toml.read_text() + "jitter_ms = 60000\n")
    db = tmp_path / "edge.sqlite3"

    result = qlsched("edge", "publish", str(toml), "--db", str(db))

    assert result.returncode == 2
    one_line_error(result.stderr)
    assert 'triggers[0] (id "t000000"): jitter_ms' in result.stderr
    assert not db.exists()


def test_an_edge_file_from_before_jitter_is_due_at_its_cursors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: an Edge file migrated up to 0005, holding a trigger with a cursor, opens with
    this version: 0008 is applied, the trigger has no jitter, its due time is its cursor,
    and a round's read finds it due at that cursor."""
    path = file_before(tmp_path, monkeypatch, keep=("0001", "0005"))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO triggers (project_id, trigger_id, revision, cron, task_id, task_revision,"
            " execution_revision_id, content_digest, created_at_ms, updated_at_ms) VALUES"
            " ('p', 'g', 1, '0 * * * *', 'job', 1, ?, printf('%064d', 3), 0, 0)",
            (OLD_EXECUTION,),
        )
        conn.execute(
            "INSERT INTO trigger_schedules (project_id, trigger_id, trigger_revision, active,"
            " next_fire_at_ms, state_version, updated_at_ms) VALUES ('p', 'g', 1, 1, ?, 7, 0);",
            (TEN,),
        )
    finally:
        conn.close()

    db = open_checked(path, create=False, apply=True, clock=lambda: TEN)
    try:
        assert read(Path(path), "SELECT revision, jitter_ms FROM triggers") == [(1, 0)]
        assert schedule(db) == [(TEN, TEN)]
        assert read(Path(path), "SELECT count(*) FROM schema_migrations WHERE version = 8") == [
            (1,)
        ]
        [claim] = trio.run(lambda: SqliteStore(db).claim("edge", 1, 30_000))
        assert (claim.cursor_ms, claim.state_version, claim.jitter) == (TEN, 7, None)
    finally:
        db.close()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


async def test_edge_status_shows_the_due_time(edge: tuple[EdgeDatabase, list[int]]) -> None:
    """Rule: ``edge status`` shows a jittered trigger's due time beside its next fire time
    in ``status``'s table, and its JSON rows carry ``jitter_ms`` and ``due_at_ms``; the lag
    counts from the due time."""
    db, now = edge
    await _publish(db, now, spec_file())
    await EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink()).run_round()
    due = TEN + h(TEN)

    def line_at(at_ms: int) -> list[str]:
        out = io.StringIO()
        render(read_status_at(at_ms), out)
        [line] = [line for line in out.getvalue().splitlines() if line.startswith("p/g")]
        return line.split()

    def read_status_at(at_ms: int) -> EdgeStatus:
        conn = sqlite3.connect(db.path, isolation_level=None)
        try:
            return read_status(conn, db.path, at_ms)
        finally:
            conn.close()

    # status's columns: TRIGGER CRON ZONE NEXT-FIRE [due DUE] LAG CLAIM LEASE SKIP COAL
    fire, at = iso(TEN)[:19].split(), iso(due).split()
    before = line_at(due - 1)
    assert before[-10:] == [*fire, "due", *at, "-", "-", "-", "0", "0"]
    assert line_at(due + 1_500)[-5:] == ["1.5s", "-", "-", "0", "0"]
    [row] = read_status_at(due).schedules
    assert (row.next_fire_at_ms, row.jitter_ms, row.due_at_ms) == (TEN, JITTER_MS, due)
