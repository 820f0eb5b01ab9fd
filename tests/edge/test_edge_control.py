"""Pause and resume on the Edge (issue #32, item 1): the cluster's controls through the
same engine and store port, with the cluster's plan (``core.pause``). Nothing of a paused
trigger is admitted, from any path: no round reads it, a round that read it before the
pause cannot write it, and a re-publish does not unpause it; a resume counts what fell
inside the pause (``skip``) or fires its latest occurrence once (``fire_once``)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from qlsched.cli import main
from qlsched.core.control import AlreadyPaused, NotPaused, Paused, Resumed, TriggerRef
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.edge.scheduler import EdgeScheduler
from qlsched.edge.settings import EdgeSettings
from qlsched.sqlite import control
from qlsched.sqlite.database import EdgeDatabase, open_checked
from qlsched.sqlite.publish import publish
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import (
    AUDIT_BAD_RUNS,
    DUPLICATES,
    OLD_EXECUTION,
    OLD_TRIGGER,
    clocked_edge,
    file_before,
    publish_file,
    read,
)
from tests.support.memory_sink import MemorySink

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
REF = TriggerRef("p", "sec")


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[EdgeDatabase, list[int]]]:
    async with clocked_edge(tmp_path, T0) as opened:
        yield opened


def spec(cron: str = "* * * * * *", misfire: str = "skip") -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command="true")],
        triggers=[
            TriggerEntry(project="p", id="sec", task="job", cron=cron, misfire=misfire)  # type: ignore[arg-type]
        ],
    )


async def runs(db: EdgeDatabase) -> list[int]:
    rows = read(Path(db.path), "SELECT scheduled_for_ms FROM runs ORDER BY 1")
    return [int(str(r[0])) for r in rows]


def row(db: EdgeDatabase) -> tuple[object, ...]:
    [found] = read(
        Path(db.path),
        "SELECT active, paused_at_ms, next_fire_at_ms, paused_total FROM trigger_schedules",
    )
    return found


async def test_a_paused_trigger_gets_no_run_and_skip_counts_the_pause(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """Paused at 10 s after its first Run, rounds for 20 s admit nothing; ``resume`` (skip)
    counts the 20 occurrences inside into ``paused_total`` and the next round fires the
    first one after it; each action is one audit row."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec(), now[0]))
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink())
    await scheduler.run_round()  # initialize at T0: cursor T0 + 1 s
    now[0] = T0 + 1_000
    await scheduler.run_round()
    assert await runs(db) == [T0 + 1_000]

    paused = await db.call(lambda conn: control.pause(conn, REF, T0 + 1_500, note="m", actor=None))
    assert isinstance(paused, Paused)
    again = await db.call(lambda conn: control.pause(conn, REF, T0 + 1_600, note=None, actor=None))
    assert isinstance(again, AlreadyPaused)
    for second in range(2, 22):
        now[0] = T0 + second * 1_000
        stats = await scheduler.run_round()
        assert stats.claimed == 0
    assert await runs(db) == [T0 + 1_000]
    assert row(db)[:2] == (0, T0 + 1_500)

    resumed = await db.call(
        lambda conn: control.resume(conn, REF, T0 + 21_500, catch_up="skip", actor="ops")
    )
    assert isinstance(resumed, Resumed)
    assert (resumed.inside, resumed.paused, resumed.next_fire_at_ms) == (20, 20, T0 + 22_000)
    assert row(db) == (1, None, T0 + 22_000, 20)
    now[0] = T0 + 22_000
    await scheduler.run_round()
    assert await runs(db) == [T0 + 1_000, T0 + 22_000]
    assert isinstance(
        await db.call(lambda conn: control.resume(conn, REF, now[0], catch_up="skip", actor=None)),
        NotPaused,
    )
    kinds = read(Path(db.path), "SELECT kind, actor_label, occurrences FROM schedule_actions")
    assert kinds == [("pause", None, 0), ("resume", "ops", 20)]
    assert read(Path(db.path), AUDIT_BAD_RUNS) == []


async def test_fire_once_fires_the_latest_occurrence_inside_the_pause_once(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """``resume --catch-up fire_once`` of a ``skip`` trigger paused past its grace: the next
    round admits exactly the latest occurrence inside the pause (whatever the grace), the
    rest are counted in ``paused_total``, and the schedule goes on from there."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec(misfire="skip"), now[0]))
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink())
    await scheduler.run_round()
    await db.call(lambda conn: control.pause(conn, REF, T0 + 500, note=None, actor=None))
    late = T0 + 300_000  # 5 min: past the 60 s grace
    resumed = await db.call(
        lambda conn: control.resume(conn, REF, late, catch_up="fire_once", actor=None)
    )
    assert isinstance(resumed, Resumed)
    assert resumed.fires_at_ms == late
    assert (resumed.inside, resumed.paused) == (300, 299)
    now[0] = late + 100
    await scheduler.run_round()
    assert await runs(db) == [late]
    now[0] = late + 1_000
    await scheduler.run_round()
    assert await runs(db) == [late, late + 1_000]
    assert read(Path(db.path), DUPLICATES) == []


async def test_a_round_that_read_the_row_before_the_pause_admits_nothing(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """A round's read taken before the pause, written after it: the compare-and-set fails
    (the pause moved the state version), so no Run is admitted after ``pause`` returned."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec(), now[0]))
    store = SqliteStore(db)
    await EdgeScheduler(store, EdgeSettings(), MemorySink()).run_round()
    now[0] = T0 + 1_000
    scheduler = EdgeScheduler(store, EdgeSettings(), MemorySink())
    claims = await store.claim("edge", 10, 30_000)
    assert len(claims) == 1
    await db.call(lambda conn: control.pause(conn, REF, now[0], note=None, actor=None))
    original = store.claim

    async def stale(owner: str, limit: int, lease_ms: int) -> list:  # type: ignore[type-arg]
        return claims  # the read from before the pause

    store.claim = stale  # type: ignore[method-assign]
    stats = await scheduler.run_round()
    store.claim = original  # type: ignore[method-assign]
    assert (stats.fired, stats.admitted) == (1, 0)
    assert await runs(db) == []


async def test_a_republish_keeps_a_paused_trigger_paused(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """Publishing the trigger again, changed (a new revision) or not, and the project's
    state again, leaves it paused and inactive; no round reads it."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec(), now[0]))
    await db.call(lambda conn: control.pause(conn, REF, now[0], note=None, actor=None))
    await db.call(lambda conn: publish(conn, spec(cron="*/2 * * * * *"), now[0] + 10))
    await db.call(lambda conn: publish(conn, spec(cron="*/2 * * * * *"), now[0] + 20))
    assert row(db)[:2] == (0, T0)
    now[0] = T0 + 10_000
    stats = await EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink()).run_round()
    assert stats.claimed == 0
    assert await runs(db) == []


def test_edge_pause_and_resume_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``edge pause`` and ``edge resume`` print ``pause``'s and ``resume``'s one line;
    ``edge status`` marks the row paused; an unknown or malformed trigger is exit 2."""
    db = str(tmp_path / "edge.sqlite3")
    assert main(["edge", "publish", str(publish_file(tmp_path / "a.toml", 1)), "--db", db]) == 0
    capsys.readouterr()
    assert main(["edge", "pause", "edge/t000000", "--db", db, "--note", "maint"]) == 0
    assert capsys.readouterr().out.startswith("paused edge/t000000 at ")
    assert main(["edge", "status", "--db", db]) == 0
    assert "edge/t000000 (paused)" in capsys.readouterr().out
    assert main(["edge", "resume", "edge/t000000", "--db", db, "--catch-up", "skip"]) == 0
    assert capsys.readouterr().out.startswith("resumed edge/t000000 at ")
    assert main(["edge", "pause", "edge/nope", "--db", db]) == 2
    assert "no trigger edge/nope" in capsys.readouterr().err
    assert main(["edge", "resume", "not-a-ref", "--db", db]) == 2


def test_an_edge_file_from_before_control_upgrades_unpaused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Edge file migrated before 0013 gains the pause columns (not paused, nothing
    counted) and the audit table when opened, and its trigger can be paused."""
    path = file_before(tmp_path, monkeypatch, keep=("0001", "0005", "0008"))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(OLD_TRIGGER, (OLD_EXECUTION,))
        conn.execute(
            "INSERT INTO trigger_schedules (project_id, trigger_id, trigger_revision, active,"
            " next_fire_at_ms, due_at_ms, state_version, updated_at_ms)"
            " VALUES ('p', 'sec', 1, 1, ?, ?, 3, 0)",
            (T0, T0),
        )
    finally:
        conn.close()
    db = open_checked(path, create=False, apply=True, clock=lambda: T0)
    try:
        assert read(Path(path), "SELECT count(*) FROM schema_migrations WHERE version = 13") == [
            (1,)
        ]
        assert read(
            Path(path), "SELECT active, paused_at_ms, paused_total FROM trigger_schedules"
        ) == [(1, None, 0)]
        outcome = trio.run(
            lambda: db.call(lambda c: control.pause(c, REF, T0, note=None, actor=None))
        )
        assert isinstance(outcome, Paused)
        assert read(Path(path), "SELECT active FROM trigger_schedules") == [(0,)]
    finally:
        db.close()
