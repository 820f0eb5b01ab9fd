"""Publish a validated file into an Edge file, in one ``BEGIN IMMEDIATE`` transaction.

The same rules as the cluster's publish (``qlsched.postgres.publish``), on the same digests
(``qlsched.core.specs``): same content is a no-op; changed content is a new revision whose
cursor is cleared and state version moved, so a round that read the old revision cannot
write; a changed task re-pins every trigger of that task; ``prune`` disables (never
deletes) triggers missing from the file. A publish may run while ``edge run`` holds the
file: SQLite's write lock serialises the two.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from qlsched.core.publish_result import Change, PublishResult, id_taken
from qlsched.core.specs import (
    PublishFile,
    TaskEntry,
    TriggerEntry,
    task_execution,
    trigger_digest,
)
from qlsched.sqlite.database import rollback
from qlsched.sqlite.queries import query


def _publish_project(conn: sqlite3.Connection, project_id: str, archived: bool, now: int) -> Change:
    state = "archived" if archived else "active"
    row = conn.execute(query("project_get"), (project_id,)).fetchone()
    if row is None:
        conn.execute(query("project_insert"), (project_id, state, now))
        return "added"
    if row[0] == state:
        return "unchanged"
    conn.execute(query("project_update"), (project_id, state, now))
    conn.execute(query("schedule_set_active"), (project_id, int(not archived)))
    return "changed"


def _publish_task(conn: sqlite3.Connection, task: TaskEntry, now: int) -> Change:
    payload, digest = task_execution(task)
    row = conn.execute(query("task_get"), (task.project, task.id)).fetchone()
    if row is not None and row[1] == digest:
        return "unchanged"
    args = (task.project, task.id, digest, task.command, now)
    if row is None:
        conn.execute(query("task_insert"), args)
        revision = 1
    else:
        revision = int(conn.execute(query("task_update"), args).fetchone()[0])
    conn.execute(
        query("execution_revision_insert"),
        (str(uuid.uuid4()), task.project, task.id, revision, payload, digest, now),
    )
    return "added" if row is None else "changed"


def _publish_trigger(
    conn: sqlite3.Connection, trigger: TriggerEntry, project_active: bool, now: int
) -> Change:
    pin = conn.execute(query("task_pin"), (trigger.project, trigger.task)).fetchone()
    assert pin is not None, "validated: the task exists"
    task_revision, task_digest, execution_id = pin
    digest = trigger_digest(trigger, str(task_digest))
    row = conn.execute(query("trigger_get"), (trigger.project, trigger.id)).fetchone()
    if row is not None and row[1] == digest:
        return "unchanged"
    args = (
        trigger.project,
        trigger.id,
        int(trigger.enabled),
        trigger.cron,
        trigger.timezone,
        trigger.misfire,
        trigger.misfire_grace_ms,
        trigger.task,
        task_revision,
        execution_id,
        digest,
        now,
        trigger.dst_gap,
        trigger.dst_fold,
        trigger.jitter_ms,
        trigger.overlap,
        trigger.start_deadline_ms,
    )
    active = int(project_active and trigger.enabled)
    if row is None:
        other = conn.execute(query("trigger_project"), (trigger.id, trigger.project)).fetchone()
        if other is not None:
            raise id_taken(trigger, other[0])
        conn.execute(query("trigger_insert"), args)
        conn.execute(query("schedule_insert"), (trigger.project, trigger.id, active, now))
        return "added"
    revision = int(conn.execute(query("trigger_update"), args).fetchone()[0])
    conn.execute(query("schedule_reset"), (trigger.project, trigger.id, revision, active, now))
    return "changed"


def _stored_trigger(project_id: str, row: Any, *, enabled: bool) -> TriggerEntry:
    """A published trigger as a file entry, to publish it again (disabled, or re-pinned)."""
    return TriggerEntry(
        project=project_id,
        id=row[0],
        task=row[6],
        cron=row[2],
        timezone=row[3],
        misfire=row[4],
        misfire_grace_ms=row[5],
        enabled=enabled,
        dst_gap=row[7],
        dst_fold=row[8],
        jitter_ms=row[9],
        overlap=row[10],
        start_deadline_ms=row[11],
    )


def publish(
    conn: sqlite3.Connection, spec: PublishFile, now_ms: int, *, prune: bool = False
) -> PublishResult:
    """Publish a validated file in one transaction: all of it or, on any error, nothing.

    Blocking: run it off the Trio thread (``EdgeDatabase.call``).
    """
    projects: dict[str, Change] = {}
    tasks: dict[str, Change] = {}
    triggers: dict[str, Change] = {}
    conn.execute(query("begin_immediate"))
    try:
        active: dict[str, bool] = {}
        for p in spec.projects:
            projects[p.id] = _publish_project(conn, p.id, p.archived, now_ms)
            active[p.id] = not p.archived
        for t in spec.tasks:
            tasks[f"{t.project}/{t.id}"] = _publish_task(conn, t, now_ms)
        for tr in spec.triggers:
            triggers[f"{tr.project}/{tr.id}"] = _publish_trigger(
                conn, tr, active[tr.project], now_ms
            )
        if prune:
            for p in spec.projects:
                for row in conn.execute(query("triggers_of_project"), (p.id,)).fetchall():
                    key = f"{p.id}/{row[0]}"
                    if key in triggers or not row[1]:
                        continue
                    _publish_trigger(
                        conn, _stored_trigger(p.id, row, enabled=False), active[p.id], now_ms
                    )
                    triggers[key] = "disabled"
        for t in spec.tasks:
            if tasks[f"{t.project}/{t.id}"] != "changed":
                continue
            for row in conn.execute(query("triggers_of_task"), (t.project, t.id)).fetchall():
                key = f"{t.project}/{row[0]}"
                if key in triggers:
                    continue
                entry = _stored_trigger(t.project, row, enabled=bool(row[1]))
                if _publish_trigger(conn, entry, active[t.project], now_ms) != "unchanged":
                    triggers[key] = "repinned"
        conn.execute(query("commit"))
    except BaseException:
        rollback(conn)
        raise
    return PublishResult(projects=projects, tasks=tasks, triggers=triggers)
