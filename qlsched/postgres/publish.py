"""Publish (admin role, one transaction): projects, tasks with their pinned execution
revisions, triggers and their schedule rows.

Same content is a no-op: no revision or version moves. Changed content is a new revision:
the schedule's cursor and claim are cleared and its state and claim versions incremented,
so every older claim fails its fence forever. A task change re-pins (and so re-revisions)
every trigger of that task in the same transaction, whether the file lists it or not
(reported ``repinned``): a trigger left pinned to the old task revision would fail its
admit forever. Triggers missing from the file are otherwise left alone unless ``prune``
(then disabled, never deleted). Publishers take turns on an advisory lock.

Set-based: each table gets a few statements carrying the file's rows as arrays (the
database returns only the triggers whose digest differs), never a round trip per row, so
an unchanged file costs one read and a large one a handful of bulk writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from qlsched.core.publish_result import Change, PublishResult, id_taken
from qlsched.core.specs import (
    PublishFile,
    TaskEntry,
    TriggerEntry,
    task_execution,
    trigger_digest,
)
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


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


class _Pin(msgspec.Struct, frozen=True):
    revision: int
    digest: str
    execution_revision_id: uuid.UUID


async def _publish_tasks(conn: Connection, tasks: list[TaskEntry], now: int) -> list[Change]:
    """Every task of the file in four statements: read the stored digests, insert the new
    tasks, give the changed ones a new revision, pin an execution revision to each."""
    executions = [task_execution(t) for t in tasks]
    payloads = [payload for payload, _ in executions]
    digests = [digest for _, digest in executions]
    rows = await conn.fetch(
        query("tasks_current"), [t.project for t in tasks], [t.id for t in tasks]
    )
    stored = {(r["project_id"], r["task_id"]): r["content_digest"] for r in rows}
    changes: list[Change] = []
    for t, d in zip(tasks, digests, strict=True):
        old = stored.get((t.project, t.id))
        changes.append("added" if old is None else "unchanged" if old == d else "changed")
    for kind, name in (("added", "tasks_insert"), ("changed", "tasks_update")):
        picked = [i for i, c in enumerate(changes) if c == kind]
        if picked:
            await conn.execute(
                query(name),
                [tasks[i].project for i in picked],
                [tasks[i].id for i in picked],
                [digests[i] for i in picked],
                [tasks[i].command for i in picked],
                now,
            )
    fresh = [i for i, c in enumerate(changes) if c != "unchanged"]
    if fresh:
        await conn.execute(
            query("execution_revisions_insert"),
            [uuid.uuid4() for _ in fresh],
            [tasks[i].project for i in fresh],
            [tasks[i].id for i in fresh],
            [payloads[i] for i in fresh],
            [digests[i] for i in fresh],
            now,
        )
    return changes


async def _pins(conn: Connection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], _Pin]:
    ordered = sorted(keys)
    rows = await conn.fetch(query("task_pins"), [k[0] for k in ordered], [k[1] for k in ordered])
    return {
        (r["project_id"], r["task_id"]): _Pin(
            r["revision"], r["content_digest"], r["execution_revision_id"]
        )
        for r in rows
    }


async def _publish_triggers(
    conn: Connection, triggers: list[TriggerEntry], active: dict[str, bool], now: int
) -> list[Change]:
    """Triggers in a handful of statements whatever their number: the digests are computed
    here, the database returns only the triggers whose digest differs, the new ones are
    checked against other projects' ids, then one insert and one update (each with the
    schedule rows) write them."""
    if not triggers:
        return []
    pins = await _pins(conn, {(t.project, t.task) for t in triggers})
    pinned = [pins[(t.project, t.task)] for t in triggers]  # validated: the task exists
    digests = [trigger_digest(t, pin.digest) for t, pin in zip(triggers, pinned, strict=True)]
    differing = await conn.fetch(
        query("triggers_differing"),
        list(range(len(triggers))),
        [t.project for t in triggers],
        [t.id for t in triggers],
        digests,
    )
    changes: list[Change] = ["unchanged"] * len(triggers)
    for r in differing:
        changes[r["n"]] = "changed" if r["stored"] else "added"
    added = [i for i, c in enumerate(changes) if c == "added"]
    if added:
        other = await conn.fetchrow(
            query("triggers_elsewhere"),
            added,
            [triggers[i].project for i in added],
            [triggers[i].id for i in added],
        )
        if other is not None:
            raise id_taken(triggers[other["n"]], other["project_id"])
    written = [i for i, c in enumerate(changes) if c != "unchanged"]
    if written:
        rows = [triggers[i] for i in written]
        await conn.execute(
            query("triggers_write"),
            [t.project for t in rows],
            [t.id for t in rows],
            [t.enabled for t in rows],
            [t.cron for t in rows],
            [t.timezone for t in rows],
            [t.misfire for t in rows],
            [t.misfire_grace_ms for t in rows],
            [t.task for t in rows],
            [pinned[i].revision for i in written],
            [pinned[i].execution_revision_id for i in written],
            [digests[i] for i in written],
            [active[t.project] and t.enabled for t in rows],
            [changes[i] == "added" for i in written],
            now,
            [t.dst_gap for t in rows],
            [t.dst_fold for t in rows],
            [t.jitter_ms for t in rows],
            [t.overlap for t in rows],
            [t.start_deadline_ms for t in rows],
        )
    return changes


def _stored_trigger(row: Any, *, enabled: bool) -> TriggerEntry:
    """A published trigger as a file entry, to publish it again (disabled, or re-pinned)."""
    return TriggerEntry(
        project=row["project_id"],
        id=row["trigger_id"],
        task=row["task_id"],
        cron=row["cron"],
        timezone=row["timezone"],
        misfire=row["misfire_policy"],
        misfire_grace_ms=row["misfire_grace_ms"],
        enabled=enabled,
        dst_gap=row["dst_gap"],
        dst_fold=row["dst_fold"],
        jitter_ms=row["jitter_ms"],
        overlap=row["overlap"],
        start_deadline_ms=row["start_deadline_ms"],
    )


Progress = Callable[[str], None]


async def publish(
    conn: Connection,
    spec: PublishFile,
    *,
    prune: bool = False,
    progress: Progress | None = None,
) -> PublishResult:
    """Publish a validated file in one transaction (the caller decoded and validated it).

    Set-based: the statements sent do not grow with the file's size, only what they carry,
    so memory is bounded by the file (and by the triggers ``prune`` or a task change
    re-publishes). ``progress`` is told each step (the caller decides whether to show it).
    """
    say = progress or (lambda _text: None)
    projects: dict[str, Change] = {}
    tasks: dict[str, Change] = {}
    triggers: dict[str, Change] = {}
    async with conn.transaction():
        await conn.execute(query("publish_lock"))
        await conn.execute(query("publish_work_mem"))
        now = int(await conn.fetchval(query("db_now_ms")))
        active: dict[str, bool] = {}
        for p in spec.projects:
            projects[p.id] = await _publish_project(conn, p.id, p.archived, now)
            active[p.id] = not p.archived
        say(f"{len(spec.tasks):,} tasks")
        task_changes = await _publish_tasks(conn, list(spec.tasks), now)
        for t, change in zip(spec.tasks, task_changes, strict=True):
            tasks[f"{t.project}/{t.id}"] = change
        say(f"{len(spec.triggers):,} triggers")
        listed = list(spec.triggers)
        for tr, change in zip(
            listed, await _publish_triggers(conn, listed, active, now), strict=True
        ):
            triggers[f"{tr.project}/{tr.id}"] = change
        # Then the triggers the file does not list: pruned ones (disabled), and those of a
        # changed task (re-pinned), each published again from its stored definition.
        file_projects = [t.project for t in listed]
        file_ids = [t.id for t in listed]
        extra: list[TriggerEntry] = []
        labels: list[Change] = []
        if prune:
            for row in await conn.fetch(
                query("triggers_to_prune"), [p.id for p in spec.projects], file_projects, file_ids
            ):
                extra.append(_stored_trigger(row, enabled=False))
                labels.append("disabled")
        changed = [t for t in spec.tasks if tasks[f"{t.project}/{t.id}"] == "changed"]
        if changed:
            pruned = {(e.project, e.id) for e in extra}
            for row in await conn.fetch(
                query("triggers_to_repin"),
                [t.project for t in changed],
                [t.id for t in changed],
                file_projects,
                file_ids,
            ):
                if (row["project_id"], row["trigger_id"]) not in pruned:
                    extra.append(_stored_trigger(row, enabled=row["enabled"]))
                    labels.append("repinned")
        if extra:
            say(f"{len(extra):,} triggers the file does not list")
        for entry, label, change in zip(
            extra, labels, await _publish_triggers(conn, extra, active, now), strict=True
        ):
            if change != "unchanged":
                triggers[f"{entry.project}/{entry.id}"] = label
    return PublishResult(projects=projects, tasks=tasks, triggers=triggers)
