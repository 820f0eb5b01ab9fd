"""The exactly-once verifier, and the observer reads behind ``qlsched demo``'s live monitor.

Role: ``verify_exactly_once`` audits a database after (or while) replicas ran: it reads the
trigger heads, the Runs with their Attempts and events, all in one read-only REPEATABLE READ
snapshot (the observer role suffices), and checks the guarantee of docs/contract.md §3/§5 with
core's own cron code:

* no duplicate: at most one Run per (project, trigger, scheduled_for), over every revision;
* none lost: per trigger, every occurrence core enumerates from its first cursor up to (not
  including) its durable cursor has a Run, or is accounted for by the schedule's counters
  (``skipped_total``: skipped by the ``skip`` policy; ``coalesced_total``: passed over by a
  late Fire). Runs whose ``scheduled_for`` is not such an occurrence are ``unexpected``;
* the admission shape of every Run: one pristine Attempt, the two admission events, a
  queue time not before its occurrence, the fence it was admitted under, and the
  idempotency key core computes for it.

What the database decides: everything before a trigger's cursor has been decided (the
cursor only moves in the same fenced write that admits or skips), so the cursor is the
window's end. The window's start is the trigger's first cursor, which nothing records: pass
the one you observed in ``first_cursors``; without it the earliest Run's ``scheduled_for``
is used, so an occurrence lost *before* the first Run goes unseen (never a false alarm).

The counters say how many occurrences were decided without a Run, not which: the count of
lost occurrences is exact, and which ones ``lost`` names is a best attribution (occurrences
no later than the queue time of the Run before them are the ones a late Fire can have passed
over). The counters live on the schedule row and survive a re-publish, while the check covers
the current revision only: with several revisions the lost count can only come out low.

Control requests (issue #18): a trigger-now Run (key ``ql3:manual:v1:…``) is checked
against its recorded request (same trigger and revision, ``scheduled_for`` = the time it was
recorded, the key core computes for it), not against the cron; one that matches no request
is ``unexpected``. A cron-keyed Run inside a recorded backfill range of its trigger and
revision is accounted for by that request when it is an occurrence of the cron, even outside
the window. Duplicates are counted over cron-keyed Runs only: a trigger-now Run may share a
millisecond with an occurrence, and its key is one per request.

The report covers the admission shape: run it before a dispatcher moves Runs on. For a large
history, ``qlsched.tools.audit`` makes the same checks set-based and returns counts.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Mapping

import msgspec

from qlsched.core.cron import next_after, parse_cron
from qlsched.core.keys import MANUAL_KEY_PREFIX, idempotency_key, manual_key
from qlsched.postgres.pool import Connection
from qlsched.tools.queries import tool_query

TriggerRef = tuple[str, str]
"""(project_id, trigger_id)."""

MAX_OCCURRENCES = 5_000_000
"""Per trigger and window: beyond this the window is refused (a wrong first cursor)."""


class Occurrence(msgspec.Struct, frozen=True, order=True):
    project_id: str
    trigger_id: str
    scheduled_for_ms: int


class RunProblem(msgspec.Struct, frozen=True):
    """One Run whose admission shape is wrong; ``problem`` says how, in a few words."""

    run_id: uuid.UUID
    project_id: str
    trigger_id: str
    scheduled_for_ms: int
    problem: str


class TriggerTally(msgspec.Struct, frozen=True, kw_only=True):
    """One trigger's window: what core expected, what the database holds."""

    project_id: str
    trigger_id: str
    revision: int
    cron: str
    timezone: str
    misfire_policy: str
    misfire_grace_ms: int
    first_ms: int | None
    """The window's first occurrence (None: nothing was scheduled yet)."""
    cursor_ms: int | None
    """The durable cursor: the window ends just before it."""
    occurrences: int
    runs: int
    skipped: int
    coalesced: int
    lost: int


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    runs: int
    duplicates: list[Occurrence]
    lost: list[Occurrence]
    unexpected: list[Occurrence]
    """Runs of the current revision at no expected occurrence (outside the window, or not
    an occurrence of the trigger's cron at all)."""
    bad_runs: list[RunProblem]
    bad_attempts: list[RunProblem]
    bad_events: list[RunProblem]
    skipped: int
    coalesced: int
    triggers: list[TriggerTally]
    manual: int = 0
    """Trigger-now Runs that match their recorded request."""
    backfilled: int = 0
    """Cron-keyed Runs inside a recorded backfill range (occurrences of the cron)."""

    @property
    def ok(self) -> bool:
        """Exactly once, and every Run in its admission shape."""
        return not (
            self.duplicates
            or self.lost
            or self.unexpected
            or self.bad_runs
            or self.bad_attempts
            or self.bad_events
        )


class _Run(msgspec.Struct, frozen=True):
    run_id: uuid.UUID
    project_id: str
    trigger_id: str
    trigger_revision: int
    scheduled_for_ms: int
    queued_at_ms: int | None
    idempotency_key: str
    state: str
    admitted_by_owner: str | None
    admitted_claim_token: uuid.UUID | None
    admitted_claim_version: int | None
    attempts: int
    pristine_attempts: int
    events: int
    admission_events: int


class _Schedule(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str
    trigger_revision: int
    active: bool
    next_fire_at_ms: int | None
    last_scheduled_at_ms: int | None
    skipped_total: int
    coalesced_total: int
    claim_version: int
    cron: str
    timezone: str
    misfire_policy: str
    misfire_grace_ms: int
    dst_gap: str = "shift"
    dst_fold: str = "first"


class _Request(msgspec.Struct, frozen=True):
    request_id: uuid.UUID
    project_id: str
    trigger_id: str
    trigger_revision: int
    kind: str
    created_at_ms: int
    from_ms: int | None
    to_ms: int | None


def is_manual(key: str) -> bool:
    """A trigger-now Run's key (one per request), not an occurrence's."""
    return key.startswith(MANUAL_KEY_PREFIX + ":")


class _Requests:
    """The recorded control requests, indexed for the checks."""

    def __init__(self, requests: list[_Request]) -> None:
        self.manual_keys: set[tuple[str, str, int, int, str]] = set()
        self.ranges: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
        for q in requests:
            if q.kind == "trigger":
                key = manual_key(q.trigger_id, q.trigger_revision, uuid.UUID(str(q.request_id)))
                self.manual_keys.add(
                    (q.project_id, q.trigger_id, q.trigger_revision, q.created_at_ms, key)
                )
            elif q.from_ms is not None and q.to_ms is not None:
                ref = (q.project_id, q.trigger_id, q.trigger_revision)
                self.ranges.setdefault(ref, []).append((q.from_ms, q.to_ms))

    def requested(self, run: _Run) -> bool:
        """A trigger-now Run that matches a recorded trigger-now request."""
        return (
            run.project_id,
            run.trigger_id,
            run.trigger_revision,
            run.scheduled_for_ms,
            run.idempotency_key,
        ) in self.manual_keys

    def in_backfill(self, run: _Run) -> bool:
        ranges = self.ranges.get((run.project_id, run.trigger_id, run.trigger_revision), ())
        return any(lo <= run.scheduled_for_ms <= hi for lo, hi in ranges)


def _run_problems(run: _Run) -> tuple[list[str], list[str], list[str]]:
    """(run, attempt, event) problems of one Run."""
    runs: list[str] = []
    if run.queued_at_ms is None:
        runs.append("not queued (queued_at_ms is NULL)")
    elif run.queued_at_ms < run.scheduled_for_ms:
        runs.append(f"queued {run.scheduled_for_ms - run.queued_at_ms} ms before its occurrence")
    if (
        not run.admitted_by_owner
        or run.admitted_claim_token is None
        or run.admitted_claim_version is None
        or run.admitted_claim_version < 1
    ):
        runs.append("no admitting fence recorded")
    expected_key = idempotency_key(run.trigger_id, run.trigger_revision, run.scheduled_for_ms)
    if not is_manual(run.idempotency_key) and run.idempotency_key != expected_key:
        runs.append(f"idempotency key {run.idempotency_key!r}, expected {expected_key!r}")
    attempts: list[str] = []
    if run.attempts != 1 or run.pristine_attempts != 1:
        attempts.append(f"{run.attempts} attempts ({run.pristine_attempts} pristine), expected 1")
    events: list[str] = []
    if run.events != 2 or run.admission_events != 2:
        events.append(
            f"{run.events} events ({run.admission_events} of run.created/run.queued), expected 2"
        )
    return runs, attempts, events


def occurrences(
    cron: str, timezone: str, dst_gap: str, dst_fold: str, first_ms: int, end_ms: int, *, who: str
) -> list[int]:
    """Core's occurrences of a cron in ``[first_ms, end_ms)`` (``who`` names it in errors)."""
    parsed = parse_cron(cron, timezone, dst_gap=dst_gap, dst_fold=dst_fold)
    found: list[int] = []
    t = next_after(parsed, first_ms - 1)
    while t < end_ms:
        found.append(t)
        if len(found) > MAX_OCCURRENCES:
            raise ValueError(
                f"{who}: more than {MAX_OCCURRENCES} occurrences in the window; "
                "is the first cursor right?"
            )
        t = next_after(parsed, t)
    return found


def _expected(schedule: _Schedule, first_ms: int, end_ms: int) -> list[int]:
    """Core's occurrences in ``[first_ms, end_ms)``."""
    return occurrences(
        schedule.cron,
        schedule.timezone,
        schedule.dst_gap,
        schedule.dst_fold,
        first_ms,
        end_ms,
        who=f"{schedule.project_id}/{schedule.trigger_id}",
    )


def _attribute_lost(
    missing: list[int], runs: list[_Run], skipped: int, coalesced: int
) -> tuple[list[int], int]:
    """Which missing occurrences the counters cannot account for, and how many counts were
    left over (more counted than missing: occurrences before the window's start).

    A late Fire at Run r passes over occurrences up to its claim time, which is no later
    than r's queue time: those are spent from ``coalesced`` first; the rest from ``skipped``,
    then from what is left of ``coalesced``.
    """
    scheduled = [r.scheduled_for_ms for r in runs]
    near: list[int] = []
    far: list[int] = []
    for t in missing:
        i = bisect.bisect_left(scheduled, t) - 1
        queued = runs[i].queued_at_ms if i >= 0 else None
        (near if queued is not None and t <= queued else far).append(t)
    budget_c, budget_s = coalesced, skipped
    unexplained: list[int] = []
    rest: list[int] = []
    for t in near:
        if budget_c > 0:
            budget_c -= 1
        else:
            rest.append(t)
    for t in sorted(far + rest):
        if budget_s > 0:
            budget_s -= 1
        elif budget_c > 0:
            budget_c -= 1
        else:
            unexplained.append(t)
    return unexplained, budget_c + budget_s


def _tally(
    schedule: _Schedule, runs: list[_Run], first_cursor: int | None, requests: _Requests
) -> tuple[TriggerTally, list[int], list[int], int]:
    """One trigger's tally, its lost and its unexpected occurrences (current revision), and
    how many of its Runs a backfill accounts for (``runs``: its cron-keyed Runs)."""
    current = sorted(
        (r for r in runs if r.trigger_revision == schedule.trigger_revision),
        key=lambda r: r.scheduled_for_ms,
    )
    backfilled = {r.scheduled_for_ms for r in current if requests.in_backfill(r)}
    cron_starts = [r.scheduled_for_ms for r in current if r.scheduled_for_ms not in backfilled]
    earliest_run = cron_starts[0] if cron_starts else None
    starts = [t for t in (first_cursor, earliest_run) if t is not None]
    first = min(starts) if starts else None
    end = schedule.next_fire_at_ms
    if end is None and current:  # cannot happen (a reset bumps the revision); stay total
        end = current[-1].scheduled_for_ms + 1
    expected = _expected(schedule, first, end) if first is not None and end is not None else []
    have = {r.scheduled_for_ms for r in current}
    expected_set = set(expected)
    cron = parse_cron(
        schedule.cron, schedule.timezone, dst_gap=schedule.dst_gap, dst_fold=schedule.dst_fold
    )
    accounted = {t for t in backfilled if next_after(cron, t - 1) == t}
    unexpected = sorted(t for t in have if t not in expected_set and t not in accounted)
    in_window = [r for r in current if r.scheduled_for_ms in expected_set]
    missing = [t for t in expected if t not in have]
    lost, _left_over = _attribute_lost(
        missing, in_window, schedule.skipped_total, schedule.coalesced_total
    )
    tally = TriggerTally(
        project_id=schedule.project_id,
        trigger_id=schedule.trigger_id,
        revision=schedule.trigger_revision,
        cron=schedule.cron,
        timezone=schedule.timezone,
        misfire_policy=schedule.misfire_policy,
        misfire_grace_ms=schedule.misfire_grace_ms,
        first_ms=first,
        cursor_ms=schedule.next_fire_at_ms,
        occurrences=len(expected),
        runs=len(in_window),
        skipped=schedule.skipped_total,
        coalesced=schedule.coalesced_total,
        lost=len(lost),
    )
    return tally, lost, unexpected, sum(1 for r in current if r.scheduled_for_ms in accounted)


async def verify_exactly_once(
    conn: Connection, *, first_cursors: Mapping[TriggerRef, int] | None = None
) -> VerifyReport:
    """Audit every trigger and Run in the database (one read-only snapshot).

    Args:
        conn: any role that may read the qlsched tables (the observer's is enough).
        first_cursors: per (project, trigger), the first cursor its Initialize set, as the
            caller observed it: the start of the window checked for lost occurrences. A
            trigger without one starts at its earliest Run.

    Raises:
        ValueError: a window of more than ``MAX_OCCURRENCES`` occurrences.
    """
    firsts = dict(first_cursors or {})
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        schedules = [_Schedule(**dict(r)) for r in await conn.fetch(tool_query("verify_schedules"))]
        requests = _Requests(
            [_Request(**dict(r)) for r in await conn.fetch(tool_query("verify_requests"))]
        )
        duplicate_rows = await conn.fetch(tool_query("verify_duplicates"))
        runs = [_Run(**dict(r)) for r in await conn.fetch(tool_query("verify_runs"))]

    by_trigger: dict[TriggerRef, list[_Run]] = {}
    bad_runs: list[RunProblem] = []
    bad_attempts: list[RunProblem] = []
    bad_events: list[RunProblem] = []
    manual = 0
    manual_unexpected: list[Occurrence] = []
    for run in runs:
        if not is_manual(run.idempotency_key):
            by_trigger.setdefault((run.project_id, run.trigger_id), []).append(run)
        elif requests.requested(run):
            manual += 1
        else:
            manual_unexpected.append(
                Occurrence(run.project_id, run.trigger_id, run.scheduled_for_ms)
            )
        for problems, into in zip(
            _run_problems(run), (bad_runs, bad_attempts, bad_events), strict=True
        ):
            into.extend(
                RunProblem(
                    run_id=uuid.UUID(str(run.run_id)),  # asyncpg's own UUID subclass
                    project_id=run.project_id,
                    trigger_id=run.trigger_id,
                    scheduled_for_ms=run.scheduled_for_ms,
                    problem=problem,
                )
                for problem in problems
            )

    tallies: list[TriggerTally] = []
    lost: list[Occurrence] = []
    unexpected: list[Occurrence] = list(manual_unexpected)
    known: set[TriggerRef] = set()
    backfilled = 0
    for schedule in schedules:
        ref = (schedule.project_id, schedule.trigger_id)
        known.add(ref)
        tally, lost_ms, unexpected_ms, filled = _tally(
            schedule, by_trigger.get(ref, []), firsts.get(ref), requests
        )
        backfilled += filled
        tallies.append(tally)
        lost += [Occurrence(*ref, t) for t in lost_ms]
        unexpected += [Occurrence(*ref, t) for t in unexpected_ms]
    for ref, orphans in by_trigger.items():  # Runs of a trigger with no schedule row
        if ref not in known:
            unexpected += [Occurrence(*ref, r.scheduled_for_ms) for r in orphans]

    return VerifyReport(
        runs=len(runs),
        duplicates=[
            Occurrence(str(r["project_id"]), str(r["trigger_id"]), int(r["scheduled_for_ms"]))
            for r in duplicate_rows
        ],
        lost=sorted(lost),
        unexpected=sorted(unexpected),
        bad_runs=bad_runs,
        bad_attempts=bad_attempts,
        bad_events=bad_events,
        skipped=sum(t.skipped for t in tallies),
        coalesced=sum(t.coalesced for t in tallies),
        triggers=tallies,
        manual=manual,
        backfilled=backfilled,
    )


# ---------------------------------------------------------------------------------------------
# The demo's live monitor (observer role) and its clean-up (superuser)


class ScheduleState(msgspec.Struct, frozen=True):
    """One schedule row's cursor and claim, with the database time of the read."""

    project_id: str
    trigger_id: str
    active: bool
    next_fire_at_ms: int | None
    claim_owner: str | None
    claim_version: int
    claim_expires_at_ms: int | None
    now_ms: int

    @property
    def claimed(self) -> bool:
        """Held under a claim that has not expired by the database clock."""
        return self.claim_expires_at_ms is not None and self.claim_expires_at_ms > self.now_ms


class RunSighting(msgspec.Struct, frozen=True):
    admitted_by_owner: str
    admitted_claim_version: int
    queued_at_ms: int | None


async def read_schedule_states(conn: Connection) -> list[ScheduleState]:
    return [ScheduleState(**dict(r)) for r in await conn.fetch(tool_query("demo_schedules"))]


async def runs_by_owner(conn: Connection) -> dict[str, int]:
    return {
        str(r["owner"]): int(r["runs"]) for r in await conn.fetch(tool_query("demo_runs_by_owner"))
    }


async def run_for_occurrence(
    conn: Connection, project_id: str, trigger_id: str, scheduled_for_ms: int
) -> RunSighting | None:
    row = await conn.fetchrow(
        tool_query("demo_run_for_occurrence"), project_id, trigger_id, scheduled_for_ms
    )
    return None if row is None else RunSighting(**dict(row))


async def drop_database(conn: Connection, database: str) -> None:
    """Drop ``database`` (superuser, connected to another database), ending its sessions."""
    statement = await conn.fetchval(tool_query("demo_drop_database_statement"), database)
    await conn.execute(statement)
