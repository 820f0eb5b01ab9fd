"""Faults of the Edge profile (docs/contract.md §12, issue #19 item 6): SIGKILL at any moment loses
and duplicates nothing; a full disk or a read-only file is one clear error with exit 1 and
nothing half-written.

A full disk is simulated with SQLite's own limit (``PRAGMA max_page_count`` on the
connection the command opens: SQLite then fails with SQLITE_FULL exactly as on a full file
system) and a read-only file system with a ``file:...?mode=ro`` URI as ``--db`` (SQLite then
fails with SQLITE_READONLY); tests run as root, so chmod or a tiny tmpfs would not stop them.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest
import trio

from qlsched.cli import main
from qlsched.edge.scheduler import EdgeScheduler, EdgeSettings
from qlsched.sqlite import database
from qlsched.sqlite.database import open_checked
from qlsched.sqlite.errors import EdgeDatabaseError
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import (
    ACCOUNTING,
    AUDIT_BAD_RUNS,
    DUPLICATES,
    publish_file,
    qlsched,
    read,
    start_run,
    wait_ready,
    wait_until,
)
from tests.support.memory_sink import MemorySink

KILLS = 22


CAUGHT_UP = """
SELECT count(*) FROM trigger_schedules AS s
 WHERE s.next_fire_at_ms > {ready_ms}
   AND EXISTS (SELECT 1 FROM runs AS r WHERE r.trigger_id = s.trigger_id)
"""


def run_count(db: Path) -> int:
    [(count,)] = read(db, "SELECT count(*) FROM runs")
    return int(str(count))


@pytest.mark.slow
def test_sigkill_during_a_burst_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """SIGKILL of ``edge run`` at random moments (22 times) during a burst of every-second
    triggers, then a clean run: no occurrence has two Runs, every Run has one pristine
    Attempt and its two events, and per trigger the Runs plus the counted passed-over
    occurrences are exactly the occurrences from its first Run up to its cursor."""
    db = tmp_path / "edge.sqlite3"
    toml = publish_file(tmp_path / "t.toml", 300)
    assert qlsched("edge", "publish", str(toml), "--db", str(db)).returncode == 0
    rng = random.Random(19)
    for _ in range(KILLS):
        [(before,)] = read(db, "SELECT count(*) FROM runs")
        proc = start_run(db, "--cadence-ms", "50", "--claim-budget", "64")
        wait_ready(proc)
        # Killed once it has admitted a random number of Runs (a moment inside the burst,
        # reached by condition whatever the machine's speed).
        wanted = int(str(before)) + rng.randint(1, 300)

        def enough(n: int = wanted) -> bool:
            return run_count(db) >= n

        wait_until(enough, what=f"{wanted} Runs")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()
    [(killed_runs,)] = read(db, "SELECT count(*) FROM runs")
    final = start_run(db, "--cadence-ms", "50", "--claim-budget", "64")
    wait_ready(final)
    ready_ms = int(time.time() * 1000)
    wait_until(
        lambda: read(db, CAUGHT_UP.format(ready_ms=ready_ms)) == [(300,)],
        what="every trigger with a Run and its cursor past the final run's start",
    )
    final.send_signal(signal.SIGTERM)
    assert final.wait(timeout=30) == 0
    for stream in (final.stdout, final.stderr):
        assert stream is not None
        stream.close()

    assert killed_runs != 0
    assert read(db, DUPLICATES) == []
    assert read(db, AUDIT_BAD_RUNS) == []
    rows = read(db, ACCOUNTING)
    assert len(rows) == 300
    for trigger, *counts in rows:
        runs, coalesced, skipped, first, cursor = (int(str(n)) for n in counts)
        assert runs > 0, trigger
        assert runs + coalesced + skipped == (cursor - first) // 1000, trigger


@pytest.fixture
def page_limit(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every connection the commands open gets ``max_page_count`` = its size now + the
    number in the list (when set): the file cannot grow past it, as on a full disk."""
    slack: list[int] = []
    original = database.connect

    def limited(db: str, **kwargs: bool) -> sqlite3.Connection:
        conn = original(db, **kwargs)
        if slack:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages + slack[0]}")
        return conn

    monkeypatch.setattr(database, "connect", limited)
    return slack


def snapshot(db: Path) -> list[tuple[object, ...]]:
    return read(db, "SELECT * FROM triggers ORDER BY trigger_id") + read(
        db, "SELECT * FROM trigger_schedules ORDER BY trigger_id"
    )


def test_publish_on_a_full_disk(
    tmp_path: Path, page_limit: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """A publish that cannot grow the file exits 1 with one line saying the disk is full,
    and the file holds exactly what it held before."""
    db = tmp_path / "edge.sqlite3"
    assert (
        main(["edge", "publish", str(publish_file(tmp_path / "a.toml", 5)), "--db", str(db)]) == 0
    )
    before = snapshot(db)
    page_limit.append(2)

    code = main(["edge", "publish", str(publish_file(tmp_path / "b.toml", 2000)), "--db", str(db)])

    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1
    assert "the disk is full or a size limit is reached (SQLITE_FULL)" in err
    assert snapshot(db) == before


def test_run_on_a_full_disk_stops_with_nothing_half_written(
    tmp_path: Path, page_limit: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """``edge run`` whose round cannot grow the file exits 1 with one clear line; no Run was
    written and no cursor moved past an occurrence without its Run."""
    db = tmp_path / "edge.sqlite3"
    assert (
        main(["edge", "publish", str(publish_file(tmp_path / "a.toml", 400)), "--db", str(db)]) == 0
    )
    page_limit.append(0)

    code = main(["edge", "run", "--db", str(db), "--cadence-ms", "50"])

    err = capsys.readouterr().err
    assert code == 1
    assert "qlsched edge run: " in err
    assert "(SQLITE_FULL)" in err
    assert "Traceback" not in err
    assert read(db, "SELECT count(*) FROM runs") == [(0,)]
    assert read(
        db, "SELECT count(*) FROM trigger_schedules WHERE last_scheduled_at_ms IS NOT NULL"
    ) == [(0,)]


def test_read_only_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A read-only file: publish and run exit 1 with one line saying so and change nothing;
    status still reads it."""
    db = tmp_path / "edge.sqlite3"
    assert (
        main(["edge", "publish", str(publish_file(tmp_path / "a.toml", 3)), "--db", str(db)]) == 0
    )
    before = snapshot(db)
    capsys.readouterr()
    uri = db.absolute().as_uri() + "?mode=ro"

    published = main(["edge", "publish", str(publish_file(tmp_path / "b.toml", 9)), "--db", uri])
    publish_err = capsys.readouterr().err
    ran = main(["edge", "run", "--db", uri])
    run_err = capsys.readouterr().err
    status = main(["edge", "status", "--db", uri])

    assert (published, ran, status) == (1, 1, 0)
    for err in (publish_err, run_err):
        assert err.count("\n") == 1, err
        assert "read-only" in err
    assert snapshot(db) == before


async def test_a_failed_round_writes_nothing(tmp_path: Path) -> None:
    """A round is one transaction: when SQLite fails part-way through its inserts (the file
    cannot grow), the error is fatal and typed, and no Run, Attempt, event or cursor of the
    round is left behind, although earlier writes of the same round had succeeded."""
    path = tmp_path / "edge.sqlite3"
    toml = publish_file(tmp_path / "a.toml", 200)
    assert qlsched("edge", "publish", str(toml), "--db", str(path)).returncode == 0
    now = [1_700_000_000_000]
    db = await trio.to_thread.run_sync(
        lambda: open_checked(str(path), create=False, apply=False, clock=lambda: now[0])
    )
    try:
        scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(claim_budget=256), MemorySink())
        assert (await scheduler.run_round()).written == 200  # initialize every cursor
        before = snapshot(path)
        pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
        db.conn.execute(f"PRAGMA max_page_count = {pages + 3}")
        now[0] += 1_500

        with pytest.raises(EdgeDatabaseError) as caught:
            await scheduler.run_round()

        assert caught.value.fatal
        assert caught.value.code == "SQLITE_FULL"
        assert read(
            path,
            "SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM attempts)"
            " + (SELECT count(*) FROM run_events)",
        ) == [(0,)]
        assert snapshot(path) == before
    finally:
        db.close()
