"""The oracle: from the publish history and the database's own times, which occurrences
must exist, and whether the end state keeps exactly once.

Pure over plain data (``check``), so the explorer and the soak share it; ``read_*`` read
that data as the superuser. The rules (docs/contract.md §3, §5):

* at most once: no two Runs for one (trigger, scheduled_for), and each key is
  ``ql3:cron:v1:<trigger>:<revision>:<scheduled_for>``;
* the right spec: a Run's ``scheduled_for`` is an occurrence of the revision it names, and
  it pins that revision's task revision and execution revision (from the history);
* the row follows its trigger: the schedule's revision is the trigger's, ``active`` is
  project active and trigger enabled, and an active trigger pins its task's current
  revision (else every admit is refused, forever);
* the cursor follows the spec: it is an occurrence of the current revision, and (when it
  is in the future of the row's last write) the first occurrence after that write, so no
  occurrence between was passed over;
* none lost silently: while a trigger keeps the revision it started with, every
  occurrence from its first cursor up to its cursor now has a Run or was counted
  (``skipped_total`` + ``coalesced_total`` grew by exactly the number without a Run).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from qlsched.core.cron import CronSchedule, next_after, parse_cron
from qlsched.core.keys import idempotency_key

OCCURRENCE_CAP = 200_000
"""Counting occurrences of one window stops here (a window is seconds to minutes)."""


@dataclasses.dataclass(frozen=True)
class Revision:
    """One published trigger revision, as the history recorded it."""

    cron: str
    timezone: str
    task_revision: int
    execution_revision_id: uuid.UUID


@dataclasses.dataclass(frozen=True)
class Start:
    """A trigger's schedule row when the window opened."""

    revision: int
    cursor_ms: int | None
    skipped: int
    coalesced: int


@dataclasses.dataclass(frozen=True)
class RunRow:
    trigger_id: str
    trigger_revision: int
    scheduled_for_ms: int
    idempotency_key: str
    task_revision: int
    execution_revision_id: uuid.UUID
    admitted_claim_token: uuid.UUID | None = None
    admitted_claim_version: int | None = None
    created_at_ms: int | None = None


@dataclasses.dataclass(frozen=True)
class Row:
    """A trigger's schedule row, trigger row, task and project at the end."""

    trigger_id: str
    schedule_revision: int
    cursor_ms: int | None
    updated_at_ms: int
    skipped: int
    coalesced: int
    active: bool
    revision: int
    enabled: bool
    cron: str
    timezone: str
    task_revision: int
    task_current: int
    project_active: bool


History = dict[tuple[str, int], Revision]
"""(trigger, revision) -> its spec, for every revision published in the window."""


@cache
def schedule_of(cron: str, timezone: str) -> CronSchedule:
    return parse_cron(cron, timezone)


def is_occurrence(cron: str, timezone: str, t: int) -> bool:
    return next_after(schedule_of(cron, timezone), t - 1) == t


def occurrences(cron: str, timezone: str, start_ms: int, end_ms: int) -> list[int]:
    """Occurrences in ``[start_ms, end_ms)``."""
    s = schedule_of(cron, timezone)
    out: list[int] = []
    t = next_after(s, start_ms - 1)
    while t < end_ms and len(out) < OCCURRENCE_CAP:
        out.append(t)
        t = next_after(s, t)
    return out


def check(
    history: Mapping[tuple[str, int], Revision],
    starts: Mapping[str, Start],
    runs: Sequence[RunRow],
    rows: Iterable[Row],
) -> list[str]:
    """Every broken rule, one line each (empty: the end state keeps exactly once)."""
    problems: list[str] = []
    seen: dict[tuple[str, int], RunRow] = {}
    for r in runs:
        label = f"run {r.trigger_id} r{r.trigger_revision}@{r.scheduled_for_ms}"
        first = seen.setdefault((r.trigger_id, r.scheduled_for_ms), r)
        if first is not r:
            problems.append(
                f"{label}: a second Run for this occurrence (first r{first.trigger_revision})"
            )
        if r.created_at_ms is not None and r.created_at_ms < r.scheduled_for_ms:
            # The explorer's triggers have no jitter: the scheduled time is the due time.
            problems.append(f"{label}: admitted at {r.created_at_ms}, before it was due")
        if r.idempotency_key != idempotency_key(
            r.trigger_id, r.trigger_revision, r.scheduled_for_ms
        ):
            problems.append(f"{label}: idempotency key {r.idempotency_key!r}")
        rev = history.get((r.trigger_id, r.trigger_revision))
        if rev is None:
            problems.append(f"{label}: revision never published in the window")
            continue
        if not is_occurrence(rev.cron, rev.timezone, r.scheduled_for_ms):
            problems.append(f"{label}: not an occurrence of its revision's cron {rev.cron!r}")
        if (r.task_revision, r.execution_revision_id) != (
            rev.task_revision,
            rev.execution_revision_id,
        ):
            problems.append(
                f"{label}: pins task r{r.task_revision}, its revision pins r{rev.task_revision}"
            )
    for row in rows:
        problems.extend(_check_row(row, starts.get(row.trigger_id), runs))
    return problems


def _check_row(row: Row, start: Start | None, runs: Sequence[RunRow]) -> list[str]:
    out: list[str] = []
    name = f"trigger {row.trigger_id}"
    if row.schedule_revision != row.revision:
        out.append(f"{name}: schedule row at r{row.schedule_revision}, trigger at r{row.revision}")
    if row.active != (row.project_active and row.enabled):
        out.append(
            f"{name}: active={row.active} but project active={row.project_active},"
            f" enabled={row.enabled}"
        )
    if row.active and row.task_revision != row.task_current:
        out.append(
            f"{name}: stranded: pins task r{row.task_revision}, the task is at r{row.task_current}"
            " (every admit is refused)"
        )
    c = row.cursor_ms
    seeded = start is not None and start.revision == row.revision and start.cursor_ms == c
    if c is not None and not seeded:  # a cursor the test placed is the window's start
        if not is_occurrence(row.cron, row.timezone, c):
            out.append(f"{name} r{row.revision}: cursor {c} is no occurrence of {row.cron!r}")
        elif (
            c > row.updated_at_ms
            and next_after(schedule_of(row.cron, row.timezone), row.updated_at_ms) != c
        ):
            first = next_after(schedule_of(row.cron, row.timezone), row.updated_at_ms)
            out.append(
                f"{name} r{row.revision}: cursor {c} passes over {first} (the first occurrence of"
                f" {row.cron!r} after the row's last write at {row.updated_at_ms})"
            )
    if start is not None and start.cursor_ms is not None and start.revision == row.revision:
        if c is None:
            out.append(f"{name}: cursor cleared without a new revision")
            return out
        expected = set(occurrences(row.cron, row.timezone, start.cursor_ms, c))
        have = {
            r.scheduled_for_ms
            for r in runs
            if r.trigger_id == row.trigger_id
            and r.trigger_revision == row.revision
            and r.scheduled_for_ms >= start.cursor_ms
        }
        extra = sorted(have - expected)
        if extra:
            out.append(f"{name}: Runs past the cursor or off the window: {extra}")
        missing = len(expected - have)
        counted = (row.skipped - start.skipped) + (row.coalesced - start.coalesced)
        if missing != counted:
            out.append(
                f"{name}: {missing} occurrences in [{start.cursor_ms}, {c}) have no Run,"
                f" {counted} were counted (skipped + coalesced)"
            )
    return out


# --- reads (superuser) ------------------------------------------------------------------------

ROWS_SQL = """
SELECT s.trigger_id, s.trigger_revision AS schedule_revision, s.next_fire_at_ms AS cursor_ms,
       s.updated_at_ms, s.skipped_total AS skipped, s.coalesced_total AS coalesced, s.active,
       t.revision, t.enabled, t.cron, t.timezone, t.task_revision,
       k.revision AS task_current, p.state = 'active' AS project_active
  FROM qlsched.trigger_schedules AS s
  JOIN qlsched.triggers AS t USING (project_id, trigger_id)
  JOIN qlsched.tasks AS k ON k.project_id = t.project_id AND k.task_id = t.task_id
  JOIN qlsched.projects AS p ON p.project_id = s.project_id
 WHERE s.project_id = $1
 ORDER BY s.trigger_id
"""

RUNS_SQL = """
SELECT trigger_id, trigger_revision, scheduled_for_ms, idempotency_key, task_revision,
       execution_revision_id, admitted_claim_token, admitted_claim_version, created_at_ms
  FROM qlsched.runs WHERE project_id = $1 ORDER BY trigger_id, scheduled_for_ms
"""

REVISIONS_SQL = """
SELECT trigger_id, revision, cron, timezone, task_revision, execution_revision_id
  FROM qlsched.triggers WHERE project_id = $1
"""


async def read_rows(conn: Any, project: str) -> list[Row]:
    return [Row(**dict(r)) for r in await conn.fetch(ROWS_SQL, project)]


async def read_runs(conn: Any, project: str) -> list[RunRow]:
    return [RunRow(**dict(r)) for r in await conn.fetch(RUNS_SQL, project)]


async def record_revisions(conn: Any, project: str, history: History) -> None:
    """Add the triggers' current revisions to ``history`` (read right after a publish)."""
    for r in await conn.fetch(REVISIONS_SQL, project):
        history.setdefault(
            (r["trigger_id"], r["revision"]),
            Revision(r["cron"], r["timezone"], r["task_revision"], r["execution_revision_id"]),
        )
