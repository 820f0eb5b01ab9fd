"""The overlap policy and start deadline on the Edge file (docs/contract.md §13).

The rule is ``core.overlap``'s, decided inside the runner's ``BEGIN IMMEDIATE``
transaction from the counts read in it: one writer per file, so nothing changes between the
read and the write but what a dispatcher of the user's own commits while the transaction
waits for the lock (SQLite serialises them; a dispatcher moves a Run by compare-and-set on
its state, so a cancelled or released Run is never also started from its old state).

The runs pass (``runs_pass``), once per round in a transaction of its own, cancels
queued Runs past their start deadline, then releases held Runs whose trigger has nothing
queued or running: both bounded by the round's budget, soonest or oldest first through
partial indexes; an idle pass is one probe (``runs_pass_probe``) and takes no write lock.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable
from typing import Literal

import msgspec

from qlsched.core.overlap import Decision, cron_decision, reads_runs
from qlsched.core.specs import Overlap
from qlsched.sqlite.database import rollback
from qlsched.sqlite.queries import query

CancelReason = Literal["overlap", "start_deadline"]
"""Who ended a Run that never finished its job (the runs table's CHECK)."""


def unfinished(conn: sqlite3.Connection, project_id: str, trigger_id: str) -> tuple[int, int]:
    """The trigger's Runs (queued or running, held)."""
    active, held = conn.execute(query("runs_unfinished"), (project_id, trigger_id)).fetchone()
    return int(active), int(held)


def decide(conn: sqlite3.Connection, policy: Overlap, project_id: str, trigger_id: str) -> Decision:
    """A cron occurrence's decision; reads the Runs only under a policy that needs them."""
    if not reads_runs(policy):
        return "queue"
    return cron_decision(policy, *unfinished(conn, project_id, trigger_id))


def count_skipped(conn: sqlite3.Connection, project_id: str, trigger_id: str) -> None:
    """A cron occurrence skipped, on its schedule row (a request's are on the request)."""
    conn.execute(query("count_overlap_skipped"), (project_id, trigger_id))


def event(conn: sqlite3.Connection, run_id: str, kind: str, now_ms: int, actor: str) -> None:
    conn.execute(query("event_next"), (str(uuid.uuid4()), run_id, kind, now_ms, actor))


def cancel(
    conn: sqlite3.Connection, run_id: str, reason: CancelReason, now_ms: int, actor: str
) -> bool:
    """Cancel a held or queued Run at once (with its pristine Attempt), or ask a running
    one's dispatcher to; each with its event. False when the Run had already ended."""
    row = conn.execute(query("run_cancel"), (run_id, reason, now_ms)).fetchone()
    if row is None:
        return False
    if row[0] == "running":
        event(conn, run_id, "run.cancel_requested", now_ms, actor)
        return True
    conn.execute(query("attempt_cancel_pristine"), (run_id, reason, now_ms))
    event(conn, run_id, "run.cancelled", now_ms, actor)
    return True


def cancel_others(
    conn: sqlite3.Connection,
    project_id: str,
    trigger_id: str,
    kept: Iterable[str],
    now_ms: int,
    actor: str,
) -> None:
    """``cancel_other``: every other unfinished Run of the trigger, after the new ones."""
    keep = set(kept)
    for (run_id,) in conn.execute(query("others_unfinished"), (project_id, trigger_id)).fetchall():
        if run_id not in keep:
            cancel(conn, run_id, "overlap", now_ms, actor)


class RunsPassStats(msgspec.Struct, frozen=True):
    deadline_cancelled: int = 0
    released: int = 0


def _cancel_past_deadline(conn: sqlite3.Connection, now_ms: int, limit: int, actor: str) -> int:
    done = 0
    for run_id, project_id, trigger_id in conn.execute(
        query("runs_past_deadline"), (now_ms, limit)
    ).fetchall():
        if conn.execute(query("run_cancel_unstarted"), (run_id, now_ms)).rowcount != 1:
            continue
        conn.execute(query("attempt_cancel_pristine"), (run_id, "start_deadline", now_ms))
        event(conn, run_id, "run.cancelled", now_ms, actor)
        conn.execute(query("count_deadline_cancelled"), (project_id, trigger_id))
        done += 1
    return done


def _release_held(conn: sqlite3.Connection, now_ms: int, limit: int, actor: str) -> int:
    seen: set[tuple[str, str]] = set()
    released = 0
    for run_id, project_id, trigger_id in conn.execute(
        query("held_releasable"), (limit,)
    ).fetchall():
        if (project_id, trigger_id) in seen:
            continue  # one Run a trigger: the first released is now queued
        seen.add((project_id, trigger_id))
        if conn.execute(query("run_release"), (run_id, now_ms)).rowcount == 1:
            event(conn, run_id, "run.released", now_ms, actor)
            released += 1
    return released


def runs_pass(conn: sqlite3.Connection, now_ms: int, limit: int, actor: str) -> RunsPassStats:
    """Blocking: deadlines, then releases, in one ``BEGIN IMMEDIATE`` transaction; nothing
    is begun when both indexes are empty (the common case: one read, no lock)."""
    if not _anything_to_do(conn, now_ms):
        return RunsPassStats()
    conn.execute(query("begin_immediate"))
    try:
        cancelled = _cancel_past_deadline(conn, now_ms, limit, actor)
        released = _release_held(conn, now_ms, limit, actor)
        conn.execute(query("commit"))
    except BaseException:
        rollback(conn)
        raise
    return RunsPassStats(deadline_cancelled=cancelled, released=released)


def _anything_to_do(conn: sqlite3.Connection, now_ms: int) -> bool:
    return bool(conn.execute(query("runs_pass_probe"), (now_ms,)).fetchone()[0])
