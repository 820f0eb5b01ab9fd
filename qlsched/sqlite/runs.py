"""The Runs both Edge admits write (a round's Fires and a request's chunk): the pinned
execution revision checked, then the Runs with their Attempts and events inserted in one
batch per table, a key another path took left out and reported.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from qlsched.core.outcomes import DigestPart, RevisionPart
from qlsched.core.overlap import Decision
from qlsched.core.specs import EXECUTOR
from qlsched.sqlite.queries import query


def admitted_as(
    decision: Decision, now_ms: int, deadline_ms: int | None
) -> tuple[str, int | None, str]:
    """A new Run's state, start deadline and second event (after ``run.created``), as the
    overlap policy decided it: a held Run gets its deadline when it is released, not now."""
    if decision == "hold":
        return "held", None, "run.held"
    return "queued", None if deadline_ms is None else now_ms + deadline_ms, "run.queued"


def execution_fault(
    conn: sqlite3.Connection, execution_revision_id: uuid.UUID, task_revision: int
) -> DigestPart | RevisionPart | None:
    """What is wrong with the execution revision a Run would pin, or None: its digest is
    re-computed from the payload, its executor checked, its task revision still current.

    The rest of what the Run pins (trigger revision and digest, task revision, project and
    trigger active) is fixed by the trigger revision, which the compare-and-set checks:
    publish moves it whenever any of them changes.
    """
    row = conn.execute(query("execution_check"), (str(execution_revision_id),)).fetchone()
    if row is None:
        return "execution"
    executor, payload, digest, pinned, task_now = row
    if pinned != task_revision or task_now != pinned:
        return "task"
    if hashlib.sha256(payload.encode("utf-8")).hexdigest() != digest:
        return "execution"
    if executor != EXECUTOR:
        return "executor"
    return None


RunRows = tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]


def insert_runs(conn: sqlite3.Connection, rows: Sequence[RunRows]) -> set[uuid.UUID]:
    """Insert Runs, then the Attempts and events of those inserted, one batch per table;
    the run ids whose key already had a Run (cron and a backfill share the cron key), which
    get nothing: a taken key is counted as admitted, never a retry loop."""
    if not rows:
        return set()
    inserted = conn.executemany(query("run_insert"), [r[0] for r in rows]).rowcount
    taken: set[uuid.UUID] = set()
    if inserted != len(rows):
        for run, _, _ in rows:
            (holder,) = conn.execute(query("run_by_key"), (run[8],)).fetchone()
            if holder != run[0]:
                taken.add(uuid.UUID(run[0]))
    kept = [r for r in rows if uuid.UUID(r[0][0]) not in taken] if taken else rows
    conn.executemany(query("attempt_insert"), [r[1] for r in kept])
    conn.executemany(query("events_insert"), [r[2] for r in kept])
    return taken
