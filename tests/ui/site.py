"""A running dashboard for the browser tests: a database with triggers, one real replica
(``qlsched run``) and ``qlsched ui``, each its own process, as an operator runs them."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import msgspec

from qlsched.admin import ProjectEntry, TaskEntry, TriggerEntry, sync
from tests.integration.schema_support import clean_env
from tests.support.pg import TestDatabase, sql_run

VIEWER: Final = "viewer-token-for-tests"
ADMIN: Final = "admin-token-for-tests"
PROJECTS: Final = ("billing", "reports")
DAILY: Final = "0 3 * * *"


class Site(msgspec.Struct, frozen=True):
    db: TestDatabase
    base: str
    """``http://127.0.0.1:PORT``."""


def publish(db: TestDatabase, per_project: int = 6) -> None:
    projects = [ProjectEntry(id=p) for p in PROJECTS]
    tasks = [TaskEntry(project=p, id="job", command="true") for p in PROJECTS]
    triggers = [
        TriggerEntry(project=p, id=f"{p}-{i:02d}", task="job", cron=DAILY, jitter_ms=0)
        for p in PROJECTS
        for i in range(per_project)
    ]
    sync.publish(db.admin_dsn, projects=projects, tasks=tasks, triggers=triggers)


def query(db: TestDatabase, sql: str, *args: Any) -> list[dict[str, Any]]:
    async def fn(conn: Any) -> list[dict[str, Any]]:
        return [dict(r) for r in await conn.fetch(sql, *args)]

    return sql_run(db.superuser_dsn, fn)


@contextmanager
def process(args: Sequence[str], env: dict[str, str], ready: str) -> Iterator[re.Match[str]]:
    """``python -m qlsched ARGS`` until the context ends; yields the match of ``ready``
    (a regular expression) on its stderr, waited for up to 120 s."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "qlsched", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(env),
    )
    found: list[re.Match[str]] = []
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            m = re.search(ready, line)
            if m and not found:
                found.append(m)
                seen.set()
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        seen.wait(120)
        if not found:
            raise AssertionError(f"{args[0]} did not start: {''.join(lines)[-3000:]}")
        yield found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
        if proc.stderr is not None:
            proc.stderr.close()


@contextmanager
def running_site(db: TestDatabase) -> Iterator[Site]:
    """One replica and the dashboard on ``db`` (tokens: VIEWER and ADMIN)."""
    replica = [
        "run",
        "--dsn",
        db.runtime_dsn,
        "--owner",
        "replica-1",
        "--lease-ms",
        "8000",
        "--cadence-ms",
        "100",
        "--stop-timeout-ms",
        "2000",
        "--summary",
        "0",
    ]
    ui = ["ui", "--dsn", db.observer_dsn, "--admin-dsn", db.admin_dsn, "--http", "127.0.0.1:0"]
    tokens = {"QLSCHED_UI_VIEWER_TOKEN": VIEWER, "QLSCHED_UI_ADMIN_TOKEN": ADMIN}
    with (
        process(replica, {}, r"replica replica-1 started"),
        process(ui, tokens, r"qlsched ui: (http://127\.0\.0\.1:\d+)/") as m,
    ):
        yield Site(db=db, base=m.group(1))
