"""The overlap policy and the start deadline on the Edge file (issue #29): what is the Edge's
own. The rule both profiles share is the conformance suite's
(``tests/conformance/test_overlap_conformance.py``); this file holds the upgrade of an
existing file (migration 0017 rebuilds ``runs``, ``attempts`` and ``run_events``) and a
real ``edge run`` process with no dispatcher, where only the deadline ends Runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from qlsched.sqlite.database import open_checked
from tests.edge.support import (
    OLD_EXECUTION,
    OLD_TRIGGER,
    file_before,
    qlsched,
    read,
    start_run,
    wait_ready,
    wait_until,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
RUN = "00000000-0000-4000-8000-0000000000aa"


def test_a_file_from_before_overlap_keeps_its_runs_and_its_foreign_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Edge file made before 0017, holding a Run with its Attempt and events, is
    upgraded in place: every row is kept, nothing points nowhere, the new columns are empty,
    the new states are allowed, and foreign keys are enforced again afterwards."""
    path = file_before(tmp_path, monkeypatch, keep=("0001", "0005", "0008", "0013", "0016"))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(OLD_TRIGGER, (OLD_EXECUTION,))
        conn.execute(
            "INSERT INTO runs VALUES (?, 'p', 'sec', 1, 'job', 1, ?, ?, 'k1', 'queued',"
            " 'runtime', ?, 0, ?, 'edge', 'tok', 0)",
            (RUN, OLD_EXECUTION, T0, T0, T0),
        )
        conn.execute(
            "INSERT INTO attempts (attempt_id, run_id, attempt_no, executor_kind, state,"
            " created_at_ms) VALUES ('a1', ?, 1, 'remote_worker', 'claimed', ?)",
            (RUN, T0),
        )
        conn.execute(
            "INSERT INTO run_events VALUES ('e1', ?, 1, 'run.created', ?, 'edge'),"
            " ('e2', ?, 2, 'run.queued', ?, 'edge')",
            (RUN, T0, RUN, T0),
        )
    finally:
        conn.close()

    db = open_checked(path, create=False, apply=True, clock=lambda: T0)
    try:
        db_path = Path(path)
        assert read(db_path, "SELECT count(*) FROM schema_migrations WHERE version = 17") == [(1,)]
        assert read(db_path, "SELECT run_id, state, start_by_ms, cancel_reason FROM runs") == [
            (RUN, "queued", None, None)
        ]
        assert read(db_path, "SELECT attempt_id, run_id, state FROM attempts") == [
            ("a1", RUN, "claimed")
        ]
        assert read(db_path, "SELECT seq, type FROM run_events ORDER BY seq") == [
            (1, "run.created"),
            (2, "run.queued"),
        ]
        assert read(db_path, "PRAGMA foreign_key_check") == []
        assert read(db_path, "SELECT overlap, start_deadline_ms FROM triggers") == [("allow", None)]

        def writes(conn: sqlite3.Connection) -> tuple[int, str]:
            enforced = int(conn.execute("PRAGMA foreign_keys").fetchone()[0])
            conn.execute("UPDATE runs SET state = 'held' WHERE run_id = ?", (RUN,))
            try:
                conn.execute(
                    "INSERT INTO attempts (attempt_id, run_id, attempt_no, executor_kind, state,"
                    " created_at_ms) VALUES ('a2', 'no-such-run', 1, 'remote_worker',"
                    " 'claimed', 0)"
                )
            except sqlite3.IntegrityError as exc:
                return enforced, str(exc)
            return enforced, "inserted"

        enforced, refused = trio.run(lambda: db.call(writes))
        assert (enforced, refused) == (1, "FOREIGN KEY constraint failed")
        assert read(db_path, "SELECT state FROM runs") == [("held",)]
    finally:
        db.close()


OVERLAP_TOML = """
[[projects]]
id = "edge"

[[tasks]]
project = "edge"
id = "job"
command = "true"

[[triggers]]
project = "edge"
id = "skp"
task = "job"
cron = "* * * * * *"
overlap = "skip"
start_deadline_ms = 1500

[[triggers]]
project = "edge"
id = "buf"
task = "job"
cron = "* * * * * *"
overlap = "buffer_one"
"""

UNFINISHED = """
SELECT trigger_id, sum(state IN ('queued', 'running')), sum(state = 'held')
  FROM runs WHERE state IN ('held', 'queued', 'running') GROUP BY trigger_id
"""
# One statement, so one snapshot of the file while `edge run` writes: per trigger, the
# occurrences from its first Run up to its cursor, each a Run or in one bucket.
BUCKETS = """
SELECT s.trigger_id, (SELECT count(*) FROM runs AS r WHERE r.trigger_id = s.trigger_id),
       s.overlap_skipped_total, s.skipped_total, s.coalesced_total, s.deadline_cancelled_total,
       (SELECT min(r.scheduled_for_ms) FROM runs AS r WHERE r.trigger_id = s.trigger_id),
       s.next_fire_at_ms
  FROM trigger_schedules AS s ORDER BY s.trigger_id
"""


def test_edge_run_skips_behind_a_run_until_its_deadline_cancels_it(tmp_path: Path) -> None:
    """A real ``edge run`` with no dispatcher: the ``skip`` trigger never has two Runs
    unfinished, its Run is cancelled 1.5 s after it was queued and the next occurrence then
    gets a Run; ``buffer_one`` keeps one queued and one held, never more. Every occurrence
    is a Run or counted, and ``edge status`` names the counts."""
    db = tmp_path / "edge.sqlite3"
    toml = tmp_path / "overlap.toml"
    toml.write_text(OVERLAP_TOML, encoding="utf-8")
    published = qlsched("edge", "publish", str(toml), "--db", str(db))
    assert published.returncode == 0, published.stderr
    assert read(db, "SELECT trigger_id, overlap, start_deadline_ms FROM triggers ORDER BY 1") == [
        ("buf", "buffer_one", None),
        ("skp", "skip", 1500),
    ]
    proc = start_run(db, "--cadence-ms", "100", "--summary", "0")
    seen: list[tuple[object, ...]] = []

    def cancelled_twice() -> bool:
        rows = read(db, UNFINISHED)
        seen.extend(rows)
        done = "SELECT deadline_cancelled_total FROM trigger_schedules WHERE trigger_id = 'skp'"
        return int(str(read(db, done)[0][0])) >= 2

    try:
        wait_ready(proc)
        wait_until(cancelled_twice, timeout_s=60, what="two Runs cancelled at their deadline")
        status = qlsched("edge", "status", "--db", str(db))
    finally:
        proc.terminate()
        proc.communicate(timeout=30)

    assert seen
    for trigger_id, active, held in seen:
        assert int(str(active)) <= 1, (trigger_id, active, held)
        assert int(str(held)) <= (1 if trigger_id == "buf" else 0), (trigger_id, held)
    for trigger_id, runs, overlap, skipped, coalesced, _cancelled, first, cursor in read(
        db, BUCKETS
    ):
        occurrences = (int(str(cursor)) - int(str(first))) // 1000
        assert int(str(runs)) + int(str(overlap)) + int(str(skipped)) + int(str(coalesced)) == (
            occurrences
        ), trigger_id
    states = "SELECT state, cancel_reason FROM runs WHERE trigger_id = 'skp' ORDER BY 1"
    assert ("cancelled", "start_deadline") in read(db, states)
    assert read(db, "SELECT state, count(*) FROM runs WHERE trigger_id = 'buf' GROUP BY 1") == [
        ("held", 1),
        ("queued", 1),
    ]
    assert status.returncode == 0, status.stderr
    assert "edge/skp: " in status.stdout
    assert "Runs cancelled at their start deadline" in status.stdout
    assert "edge/buf: " in status.stdout


def test_edge_requests_take_overlap_allow(tmp_path: Path) -> None:
    """``edge trigger`` and ``edge backfill`` take ``--overlap allow`` (kept on the
    request, so the trigger's policy is ignored for it); any other value is bad input."""
    db = tmp_path / "edge.sqlite3"
    toml = tmp_path / "overlap.toml"
    toml.write_text(OVERLAP_TOML, encoding="utf-8")
    assert qlsched("edge", "publish", str(toml), "--db", str(db)).returncode == 0
    now = qlsched("edge", "trigger", "edge/skp", "--db", str(db), "--overlap", "allow")
    back = qlsched(
        "edge", "backfill", "edge/buf", "--from", "2025-01-01T00:00:00",
        "--to", "2025-01-01T00:00:05", "--db", str(db),
    )  # fmt: skip
    bad = qlsched("edge", "trigger", "edge/skp", "--db", str(db), "--overlap", "skip")
    assert (now.returncode, back.returncode, bad.returncode) == (0, 0, 2), bad.stderr
    assert "Traceback" not in bad.stderr
    assert read(db, "SELECT kind, overlap FROM control_requests ORDER BY kind") == [
        ("backfill", None),
        ("trigger", "allow"),
    ]
