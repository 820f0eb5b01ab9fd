"""Helpers of the Edge tests: publish files, the ``qlsched`` process, and the audit reads."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.abc import Traversable
from pathlib import Path

import pytest
import trio

import qlsched.sqlite.migrate as migrate_module
from qlsched.sqlite.database import EdgeDatabase, open_checked

REPO = Path(__file__).resolve().parents[2]

# Every Run: one pristine claimed remote_worker Attempt and exactly run.created, run.queued.
AUDIT_BAD_RUNS = """
SELECT r.run_id FROM runs AS r
 WHERE r.state <> 'queued' OR r.owner <> 'runtime' OR r.queued_at_ms IS NULL
    OR (SELECT count(*) FROM attempts AS a WHERE a.run_id = r.run_id) <> 1
    OR NOT EXISTS (
        SELECT 1 FROM attempts AS a
         WHERE a.run_id = r.run_id AND a.attempt_no = 1 AND a.state = 'claimed'
           AND a.executor_kind = 'remote_worker' AND a.worker_id IS NULL
           AND a.session_id IS NULL AND a.lease_id IS NULL AND a.offer_id IS NULL
           AND a.callback_token IS NULL AND a.started_at_ms IS NULL AND a.result IS NULL
           AND a.error IS NULL)
    OR (SELECT group_concat(e.seq || ':' || e.type, ',') FROM
          (SELECT seq, type FROM run_events WHERE run_id = r.run_id ORDER BY seq) AS e)
       IS NOT '1:run.created,2:run.queued'
"""
DUPLICATES = """
SELECT trigger_id, scheduled_for_ms FROM runs
 GROUP BY trigger_id, scheduled_for_ms HAVING count(*) > 1
"""
# Per trigger of an every-second cron: the occurrences from its first Run up to its cursor,
# each either a Run or counted as passed over (coalesced) or skipped.
ACCOUNTING = """
SELECT s.trigger_id, count(r.run_id), s.coalesced_total, s.skipped_total,
       min(r.scheduled_for_ms), s.next_fire_at_ms
  FROM trigger_schedules AS s LEFT JOIN runs AS r ON r.trigger_id = s.trigger_id
 GROUP BY s.trigger_id
"""


def publish_file(
    path: Path,
    triggers: int,
    *,
    cron: str = "* * * * * *",
    misfire: str = "fire_once",
    task_command: str = "true",
) -> Path:
    lines = ['[[projects]]\nid = "edge"\n', '[[tasks]]\nproject = "edge"\nid = "job"']
    lines.append(f'command = "{task_command}"\n')
    for i in range(triggers):
        lines.append(
            f'[[triggers]]\nproject = "edge"\nid = "t{i:06d}"\ntask = "job"\ncron = "{cron}"\n'
            f'misfire = "{misfire}"\n'
        )
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(REPO)}
    out.pop("QLSCHED_EDGE_DB", None)
    return out


def qlsched(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qlsched", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
        check=False,
    )


def start_run(db: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "qlsched", "edge", "run", "--db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )


def wait_ready(proc: subprocess.Popen[str]) -> str:
    """Read the run's stderr up to its 'scheduling' line (it prints it once rounds start)."""
    assert proc.stderr is not None
    seen = ""
    while True:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"edge run ended before it was ready: {seen}")
        seen += line
        if "scheduling" in line:
            return seen


def wait_until(check: Callable[[], bool], *, timeout_s: float = 30.0, what: str = "") -> None:
    """Call ``check`` every 50 ms until it is true; fail after ``timeout_s`` naming ``what``.

    Tests wait on the condition they need (Runs written, a cursor moved), never a fixed
    sleep: a slow machine then only waits longer instead of failing."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or check}")
        time.sleep(0.05)


def runs_of(db: Path, triggers: tuple[str, ...]) -> Callable[[], bool]:
    """A check: each trigger named has at least one Run in the file."""

    def check() -> bool:
        found = {str(r[0]) for r in read(db, "SELECT DISTINCT trigger_id FROM runs")}
        return set(triggers) <= found

    return check


def read(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def file_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, keep: tuple[str, ...]) -> str:
    """An Edge file migrated only to the shipped migrations whose names start with ``keep``
    (as an earlier version left it), holding project ``p``, task ``job`` and its execution
    revision; the caller inserts the trigger the upgrade is about."""
    old = tmp_path / "old"
    old.mkdir()
    for entry in migrate_module.schema_dir().iterdir():
        if entry.name == "ledger.sql" or entry.name.startswith(keep):
            (old / entry.name).write_bytes(entry.read_bytes())

    def patched() -> Traversable:
        return old

    path = str(tmp_path / "edge.sqlite3")
    with monkeypatch.context() as m:
        m.setattr(migrate_module, "schema_dir", patched)
        open_checked(path, create=True, apply=True).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(
            "INSERT INTO projects VALUES ('p', 'active', 1, 0, 0);"
            "INSERT INTO tasks VALUES ('p', 'job', 1, printf('%064d', 1), 'true', 0, 0);"
        )
        conn.execute(
            "INSERT INTO execution_revisions VALUES"
            " (?, 'p', 'job', 1, 'remote_worker', '{}', printf('%064d', 2), 0)",
            (OLD_EXECUTION,),
        )
    finally:
        conn.close()
    return path


OLD_EXECUTION = "00000000-0000-4000-8000-000000000001"
"""The execution revision ``file_before`` stores."""
OLD_TRIGGER = (
    "INSERT INTO triggers (project_id, trigger_id, revision, cron, task_id, task_revision,"
    " execution_revision_id, content_digest, created_at_ms, updated_at_ms) VALUES"
    " ('p', 'sec', 1, '* * * * * *', 'job', 1, ?, printf('%064d', 3), 0, 0)"
)
"""Trigger p/sec, every second, as a file before the later migrations holds it (its one
parameter: ``OLD_EXECUTION``)."""


@asynccontextmanager
async def clocked_edge(
    tmp_path: Path, start_ms: int
) -> AsyncIterator[tuple[EdgeDatabase, list[int]]]:
    """A new Edge file whose clock reads ``now[0]`` (epoch ms, starting at ``start_ms``):
    the test moves time by assigning it."""
    now = [start_ms]
    path = str(tmp_path / "edge.sqlite3")
    db = await trio.to_thread.run_sync(
        lambda: open_checked(path, create=True, apply=True, clock=lambda: now[0])
    )
    try:
        yield db, now
    finally:
        db.close()
