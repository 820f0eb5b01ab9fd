"""Publish (admin role, one transaction): projects, tasks with their pinned execution
revisions, triggers and their schedule rows.

Same content is a no-op: no revision or version moves. Changed content is a new revision:
the schedule's cursor and claim are cleared and its state and claim versions incremented,
so every older claim fails its fence forever. A task change re-pins (and so re-revisions)
every trigger of that task in the same transaction, whether the file lists it or not
(reported ``repinned``): a trigger left pinned to the old task revision would fail its
admit forever. Triggers missing from the file are otherwise left alone unless ``prune``
(then disabled, never deleted). Publishers take turns on an advisory lock.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

import msgspec

from qlsched.core.specs import (
    TRIGGER_ID_SCOPE,
    PublishFile,
    SpecError,
    TaskEntry,
    TriggerEntry,
    execution_payload,
    sha256_hex,
    trigger_digest,
)
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query

Change = Literal["added", "changed", "unchanged", "disabled", "repinned"]


class PublishResult(msgspec.Struct, frozen=True):
    projects: dict[str, Change]
    tasks: dict[str, Change]
    triggers: dict[str, Change]
    """Keyed ``project/trigger``."""


async def _publish_project(conn: Connection, project_id: str, archived: bool, now: int) -> Change:
    state = "archived" if archived else "active"
    row = await conn.fetchrow(query("project_get"), project_id)
    if row is None:
        await conn.execute(query("project_insert"), project_id, state, now)
        return "added"
    if row["state"] == state:
        return "unchanged"
    await conn.execute(query("project_update"), project_id, state, now)
    await conn.execute(query("schedule_set_active"), project_id, not archived)
    return "changed"


async def _publish_task(conn: Connection, task: TaskEntry, now: int) -> Change:
    payload = execution_payload(task.project, task)
    digest = sha256_hex(payload)
    row = await conn.fetchrow(query("task_get"), task.project, task.id)
    if row is not None and row["content_digest"] == digest:
        return "unchanged"
    if row is None:
        await conn.execute(query("task_insert"), task.project, task.id, digest, task.command, now)
        revision = 1
    else:
        revision = await conn.fetchval(
            query("task_update"), task.project, task.id, digest, task.command, now
        )
    await conn.execute(
        query("execution_revision_insert"),
        uuid.uuid4(),
        task.project,
        task.id,
        revision,
        payload,
        digest,
        now,
    )
    return "added" if row is None else "changed"


async def _publish_trigger(
    conn: Connection, trigger: TriggerEntry, project_active: bool, now: int
) -> Change:
    pin = await conn.fetchrow(query("task_pin"), trigger.project, trigger.task)
    assert pin is not None, "validated: the task exists"
    digest = trigger_digest(trigger, str(pin["content_digest"]))
    row = await conn.fetchrow(query("trigger_get"), trigger.project, trigger.id)
    if row is not None and row["content_digest"] == digest:
        return "unchanged"
    args = (
        trigger.project,
        trigger.id,
        trigger.enabled,
        trigger.cron,
        trigger.timezone,
        trigger.misfire,
        trigger.misfire_grace_ms,
        trigger.task,
        pin["revision"],
        pin["execution_revision_id"],
        digest,
        now,
    )
    active = project_active and trigger.enabled
    if row is None:
        other = await conn.fetchval(query("trigger_project"), trigger.id, trigger.project)
        if other is not None:
            raise SpecError(
                f"trigger {trigger.project}/{trigger.id}: id: "
                + TRIGGER_ID_SCOPE.format(project=other)
                + " (published before); nothing was published"
            )
        await conn.execute(query("trigger_insert"), *args)
        await conn.execute(query("schedule_insert"), trigger.project, trigger.id, 1, active, now)
        return "added"
    revision = await conn.fetchval(query("trigger_update"), *args)
    await conn.execute(query("schedule_reset"), trigger.project, trigger.id, revision, active, now)
    return "changed"


def _stored_trigger(project_id: str, row: Any, *, enabled: bool) -> TriggerEntry:
    """A published trigger as a file entry, to publish it again (disabled, or re-pinned)."""
    return TriggerEntry(
        project=project_id,
        id=row["trigger_id"],
        task=row["task_id"],
        cron=row["cron"],
        timezone=row["timezone"],
        misfire=row["misfire_policy"],
        misfire_grace_ms=row["misfire_grace_ms"],
        enabled=enabled,
    )


async def publish(conn: Connection, spec: PublishFile, *, prune: bool = False) -> PublishResult:
    """Publish a validated file in one transaction (the caller decoded and validated it)."""
    projects: dict[str, Change] = {}
    tasks: dict[str, Change] = {}
    triggers: dict[str, Change] = {}
    async with conn.transaction():
        await conn.execute(query("publish_lock"))
        now = int(await conn.fetchval(query("db_now_ms")))
        active: dict[str, bool] = {}
        for p in spec.projects:
            projects[p.id] = await _publish_project(conn, p.id, p.archived, now)
            active[p.id] = not p.archived
        for t in spec.tasks:
            tasks[f"{t.project}/{t.id}"] = await _publish_task(conn, t, now)
        for tr in spec.triggers:
            triggers[f"{tr.project}/{tr.id}"] = await _publish_trigger(
                conn, tr, active[tr.project], now
            )
        if prune:
            for p in spec.projects:
                for row in await conn.fetch(query("triggers_of_project"), p.id):
                    key = f"{p.id}/{row['trigger_id']}"
                    if key in triggers or not row["enabled"]:
                        continue
                    disabled = _stored_trigger(p.id, row, enabled=False)
                    await _publish_trigger(conn, disabled, active[p.id], now)
                    triggers[key] = "disabled"
        for t in spec.tasks:
            if tasks[f"{t.project}/{t.id}"] != "changed":
                continue
            for row in await conn.fetch(query("triggers_of_task"), t.project, t.id):
                key = f"{t.project}/{row['trigger_id']}"
                if key in triggers:
                    continue
                entry = _stored_trigger(t.project, row, enabled=row["enabled"])
                if await _publish_trigger(conn, entry, active[t.project], now) != "unchanged":
                    triggers[key] = "repinned"
    return PublishResult(projects=projects, tasks=tasks, triggers=triggers)
