"""Recording a trigger-now or backfill request in the Edge file (``edge trigger``, ``edge
backfill``), as the cluster's admin does; ``edge run`` admits it (``sqlite.requests``).

One ``BEGIN IMMEDIATE`` transaction: the trigger is read once; a request for a missing,
disabled or archived trigger, a range past now or holding more occurrences than its ``max``
(counted exactly, ``core.requests.record_check``) is refused before anything is written;
else one pending row and its audit row (``schedule_actions``) commit together.
"""

from __future__ import annotations

import sqlite3
import uuid

from qlsched.core.control import TriggerRef
from qlsched.core.requests import (
    NotRecorded,
    Recorded,
    RecordResult,
    RequestAsk,
    RequestTarget,
    record_check,
)
from qlsched.sqlite.control import os_user, record_action
from qlsched.sqlite.database import rollback
from qlsched.sqlite.queries import query


def record_request(
    conn: sqlite3.Connection, ref: TriggerRef, now_ms: int, ask: RequestAsk
) -> RecordResult:
    """Blocking: record ``ask`` at ``now_ms`` (its note, actor and range already checked)."""
    kind, note, actor, span, overlap = ask.kind, ask.note, ask.actor, ask.span, ask.overlap
    p, t = ref.project_id, ref.trigger_id
    conn.execute(query("begin_immediate"))
    try:
        row = conn.execute(query("request_target"), (p, t)).fetchone()
        target = None if row is None else RequestTarget(row[0], bool(row[1]), *row[2:7])
        checked = record_check(p, t, target, now_ms, span, ask.max_occurrences)
        if isinstance(checked, NotRecorded):
            rollback(conn)
            return checked
        total, first = checked
        request_id = uuid.uuid4()
        user = os_user()
        conn.execute(
            query("request_insert"),
            (
                *(str(request_id), p, t, row[0], kind, note, actor, user, now_ms),
                *(span or (None, None)),
                *(total, ask.max_occurrences, first, overlap),
            ),
        )
        record_action(
            conn,
            ref,
            row,
            kind,
            note=note,
            actor=actor,
            at_ms=now_ms,
            occurrences=1 if total is None else total,
        )
        conn.execute(query("commit"))
    except BaseException:
        rollback(conn)
        raise
    return Recorded(
        request_id=request_id,
        project_id=p,
        trigger_id=t,
        trigger_revision=row[0],
        kind=kind,
        created_at_ms=now_ms,
        requested_by=user,
        total=total,
    )
