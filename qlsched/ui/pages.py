"""The dashboard's pages (GET): each one or a few bounded observer reads, then a template.

Lists page by key: a "next" link carries the last key shown (``after`` or ``before``), and
the first page is the page without it. Filters travel in the query string, so every view
has an address and works without JavaScript.
"""

from __future__ import annotations

import uuid
from itertools import islice
from typing import Final

from qlsched.core.control import ControlError, trigger_ref
from qlsched.core.cron import CronSchedule, iter_after, parse_cron
from qlsched.core.jitter import jitter_offset_ms
from qlsched.postgres import ui as reads
from qlsched.postgres.pool import Connection
from qlsched.postgres.status import StatusRequest
from qlsched.ui.app import Dashboard
from qlsched.ui.hooks import cancel_available
from qlsched.ui.timeline import timeline
from qlsched.ui.web import Request, Response, text

PAGE: Final = 50
UPCOMING: Final = 10


async def overview(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    view = await ui.read(reads.overview)
    return ui.page(req, "overview.html", title="Overview", o=view, now=view.now_ms, refresh=True)


def _state(value: str) -> reads.ScheduleState:
    for state in reads.STATES:
        if state == value:
            return state
    return ""


def _after(value: str) -> tuple[str, str]:
    if not value:
        return ("", "")
    try:
        ref = trigger_ref(value)
    except ControlError:
        return ("", "")
    return (ref.project_id, ref.trigger_id)


def schedule_filter(req: Request) -> dict[str, str]:
    """The schedules filter as given (query string or bulk form), normalised."""
    source = req.form if req.method == "POST" else req.query
    return {
        "q": source.get("q", "").strip()[:200],
        "project": source.get("project", "").strip()[:63],
        "state": _state(source.get("state", "").strip()),
    }


async def schedule_page(
    ui: Dashboard, flt: dict[str, str], after: tuple[str, str], limit: int
) -> reads.SchedulePage:
    async def fn(conn: Connection) -> reads.SchedulePage:
        return await reads.schedules(
            conn,
            after=after,
            project=flt["project"],
            search=flt["q"],
            state=_state(flt["state"]),
            limit=limit,
        )

    return await ui.read(fn)


async def schedules(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    flt = schedule_filter(req)
    page = await schedule_page(ui, flt, _after(req.arg("after")), PAGE)
    return ui.page(
        req,
        "schedules.html",
        title="Schedules",
        rows=page.rows,
        flt=flt,
        states=reads.STATES,
        now=page.now_ms,
        following=None if page.resume is None else "/".join(page.resume),
        partial=page.resume is not None and len(page.rows) < PAGE,
        paged=bool(req.arg("after")),
        flash=ui.flash(req),
    )


def upcoming(cron: CronSchedule, s: reads.Schedule, now_ms: int) -> list[tuple[int, int]]:
    """The next occurrences from the cursor (or from now when there is none, or the row is
    paused), each with its due time (its jitter added)."""
    start = s.next_fire_at_ms
    if start is None or s.paused_at_ms is not None or not s.active:
        times = list(islice(iter_after(cron, now_ms), UPCOMING))
    else:
        times = [start, *islice(iter_after(cron, start), UPCOMING - 1)]
    return [
        (t, t + jitter_offset_ms(s.project_id, s.trigger_id, s.trigger_revision, t, s.jitter_ms))
        for t in times
    ]


async def schedule(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    project_id, trigger_id = groups

    async def fn(
        conn: Connection,
    ) -> tuple[reads.Schedule | None, list[reads.RunLine], list[reads.Action], int]:
        row = await reads.schedule(conn, project_id, trigger_id)
        if row is None:
            return None, [], [], 0
        runs = await reads.trigger_runs(conn, project_id, trigger_id, limit=PAGE)
        acts = await reads.actions(conn, project_id=project_id, trigger_id=trigger_id, limit=20)
        return row, runs, acts, await reads.now_ms(conn)

    s, runs, acts, now = await ui.read(fn)
    if s is None:
        return text(404, f"no schedule {project_id}/{trigger_id}")
    cron = parse_cron(s.cron, s.timezone, dst_gap=s.dst_gap, dst_fold=s.dst_fold)
    ahead = upcoming(cron, s, now)
    return ui.page(
        req,
        "schedule.html",
        title=f"{project_id}/{trigger_id}",
        s=s,
        runs=runs,
        actions=acts,
        upcoming=ahead,
        line=timeline(runs, [t for t, _ in ahead], now, label="next"),
        now=now,
        flash=ui.flash(req),
    )


def _before_key(value: str) -> tuple[int, uuid.UUID] | None:
    at, _, ident = value.partition("_")
    try:
        return int(at), uuid.UUID(ident)
    except ValueError:
        return None


async def runs(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    state = req.arg("state")
    state = state if state in reads.RUN_STATES else ""
    trigger = req.arg("trigger")
    hours = req.arg("hours")
    before_arg = req.arg("before")

    async def fn(conn: Connection) -> tuple[list[reads.RunLine], int, str | None]:
        now = await reads.now_ms(conn)
        since = now - int(hours) * reads.HOUR_MS if hours.isdigit() else 0
        if trigger:
            # One trigger's Runs by occurrence (its index), filtered here: at most a page
            # of its history is read per request.
            ref = trigger_ref(trigger)
            before = int(before_arg) if before_arg.isdigit() else reads.BIG_MS
            page = await reads.trigger_runs(
                conn, ref.project_id, ref.trigger_id, before_ms=before, limit=PAGE
            )
            following = str(page[-1].scheduled_for_ms) if len(page) >= PAGE else None
            rows = [
                r for r in page if (not state or r.state == state) and r.scheduled_for_ms >= since
            ]
            if page and page[-1].scheduled_for_ms < since:
                following = None
            return rows, now, following
        key = _before_key(before_arg) or (reads.BIG_MS, reads.MAX_UUID)
        rows = await reads.runs(conn, before=key, since_ms=since, state=state, limit=PAGE)
        last = rows[-1] if len(rows) == PAGE else None
        return rows, now, None if last is None else f"{last.created_at_ms}_{last.run_id}"

    try:
        rows, now, following = await ui.read(fn)
    except ControlError as exc:
        return ui.refuse(req, 400, str(exc))
    return ui.page(
        req,
        "runs.html",
        title="Runs",
        runs=rows,
        now=now,
        states=reads.RUN_STATES,
        flt={"state": state, "trigger": trigger, "hours": hours},
        following=following,
    )


async def run(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    try:
        run_id = uuid.UUID(groups[0])
    except ValueError:
        return text(404, "not found")

    async def fn(
        conn: Connection,
    ) -> tuple[tuple[reads.Run, list[reads.Attempt], list[reads.RunEvent]] | None, int]:
        return await reads.run(conn, run_id), await reads.now_ms(conn)

    found, now = await ui.read(fn)
    if found is None:
        return text(404, f"no Run {run_id}")
    r, attempts, events = found
    return ui.page(
        req,
        "run.html",
        title=f"Run {r.run_id}",
        r=r,
        attempts=attempts,
        events=events,
        now=now,
        can_cancel=cancel_available() and not r.finished,
        flash=ui.flash(req),
    )


async def requests(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    before = _before_key(req.arg("before")) or (reads.BIG_MS, reads.MAX_UUID)

    async def fn(conn: Connection) -> tuple[list[StatusRequest], int]:
        return await reads.requests(conn, before=before, limit=PAGE), await reads.now_ms(conn)

    rows, now = await ui.read(fn)
    following = None
    if len(rows) == PAGE:
        following = f"{rows[-1].created_at_ms}_{rows[-1].request_id}"
    return ui.page(req, "requests.html", title="Requests", rows=rows, now=now, following=following)


async def audit(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    before = req.arg("before")
    trigger = req.arg("trigger")
    project_id = trigger_id = ""
    if trigger:
        try:
            ref = trigger_ref(trigger)
        except ControlError as exc:
            return ui.refuse(req, 400, str(exc))
        project_id, trigger_id = ref.project_id, ref.trigger_id

    async def fn(conn: Connection) -> tuple[list[reads.Action], int]:
        rows = await reads.actions(
            conn,
            before=int(before) if before.isdigit() else reads.BIG_MS,
            project_id=project_id,
            trigger_id=trigger_id,
            limit=PAGE,
        )
        return rows, await reads.now_ms(conn)

    rows, now = await ui.read(fn)
    following = rows[-1].action_id if len(rows) == PAGE else None
    return ui.page(
        req, "audit.html", title="Audit", rows=rows, now=now, trigger=trigger, following=following
    )
