"""The dashboard's actions: the admin API's own calls, with the signed-in user as actor.

Each POST has passed the app's checks (admin, same origin, CSRF) before it gets here, and
calls ``qlsched.admin`` (pause, resume, trigger-now, backfill, cancel; bulk forms call
``postgres.control``'s pause and resume on one admin connection), so each action is the
same transaction with the same ``schedule_actions`` row as the command line's. Then the
browser is sent back to the page it acted on, with one line saying what happened.

Two actions show what they will do before doing it: a backfill shows the exact count of
occurrences its range holds (counted by the scheduler's own cron code) and records with
that count as its ``max``, so a range that grew since (a re-publish) is refused with its new
count rather than recorded larger; a bulk pause or resume shows how many schedules the
filter matches (at most ``BULK_MAX``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, assert_never

from qlsched import admin
from qlsched.admin._session import as_admin
from qlsched.admin.requests import check_range
from qlsched.core.control import (
    ACTOR_MAX_CHARS,
    NOTE_MAX_CHARS,
    ControlError,
    Paused,
    PauseOutcome,
    Resumed,
    ResumeOutcome,
    TriggerRef,
    checked_text,
)
from qlsched.core.control_lines import outcome_line
from qlsched.core.cron import parse_cron
from qlsched.core.pause import CatchUp
from qlsched.core.requests import (
    BACKFILL_MAX_HARD_CAP,
    NotRecorded,
    Recorded,
    RecordResult,
    backfill_count,
)
from qlsched.core.work import (
    AlreadyFinished,
    CancelledQueued,
    CancelOutcome,
    CancelRequested,
    UnknownRun,
)
from qlsched.postgres import control
from qlsched.postgres import ui as reads
from qlsched.postgres.login import WrongRole
from qlsched.postgres.pool import Connection
from qlsched.ui.app import Dashboard
from qlsched.ui.pages import schedule_filter, schedule_page
from qlsched.ui.web import Request, Response, text

BULK_MAX: Final = 1000


def _back(ui: Dashboard, ref: TriggerRef, message: str) -> Response:
    return ui.back(f"/schedules/{ref}", message)


def _note(req: Request) -> str | None:
    return checked_text(req.field("note"), what="note", max_chars=NOTE_MAX_CHARS)


def _actor(req: Request) -> str:
    return req.who.user[:ACTOR_MAX_CHARS]


def _dsn(ui: Dashboard) -> str:
    assert ui.admin_dsn is not None  # the app refuses every POST without one
    return ui.admin_dsn


def record_text(result: RecordResult) -> str:
    match result:
        case Recorded(kind="backfill") as r:
            return f"backfill recorded for {r.total} occurrence(s): request {r.request_id}"
        case Recorded() as r:
            return f"trigger-now recorded: request {r.request_id}"
        case NotRecorded() as r:
            return r.message().replace("--max", "the count shown")
        case _:
            assert_never(result)


def _catch_up(value: str) -> CatchUp:
    return "fire_once" if value == "fire_once" else "skip"


async def pause(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    ref = TriggerRef(*groups)
    try:
        outcome = await admin.pause(_dsn(ui), ref, note=_note(req), actor=_actor(req))
    except ControlError as exc:
        return _back(ui, ref, str(exc))
    return _back(ui, ref, outcome_line(outcome))


async def resume(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    ref = TriggerRef(*groups)
    try:
        outcome = await admin.resume(
            _dsn(ui),
            ref,
            catch_up=_catch_up(req.field("catch_up")),
            note=_note(req),
            actor=_actor(req),
        )
    except ControlError as exc:
        return _back(ui, ref, str(exc))
    return _back(ui, ref, outcome_line(outcome))


async def trigger_now(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    ref = TriggerRef(*groups)
    try:
        result = await admin.trigger_now(_dsn(ui), ref, note=_note(req), actor=_actor(req))
    except ControlError as exc:
        return _back(ui, ref, str(exc))
    return _back(ui, ref, record_text(result))


def _instant(value: str, what: str) -> int:
    """A ``datetime-local`` value (or any ISO 8601 time) as epoch ms, UTC when bare."""
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ControlError(f"{what}: {value!r} is not a date and time") from None
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)


async def backfill_preview(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    """GET: the exact count of the range's occurrences, and the form that records them."""
    ref = TriggerRef(*groups)
    try:
        from_ms = _instant(req.arg("from"), "from")
        to_ms = _instant(req.arg("to"), "to")
        note = checked_text(req.arg("note"), what="note", max_chars=NOTE_MAX_CHARS)
        check_range(from_ms, to_ms, 1)
    except ControlError as exc:
        return _back(ui, ref, str(exc))

    async def fn(conn: Connection) -> tuple[reads.Schedule | None, int]:
        return await reads.schedule(conn, *groups), await reads.now_ms(conn)

    s, now = await ui.read(fn)
    if s is None:
        return text(404, f"no schedule {ref}")
    if to_ms > now:
        return _back(ui, ref, "refused: the range's end is later than the database's time now")
    cron = parse_cron(s.cron, s.timezone, dst_gap=s.dst_gap, dst_fold=s.dst_fold)
    count = backfill_count(cron, from_ms, to_ms)
    return ui.page(
        req,
        "backfill.html",
        title=f"Backfill {ref}",
        s=s,
        from_ms=from_ms,
        to_ms=to_ms,
        note=note or "",
        count=count,
        too_many=count > BACKFILL_MAX_HARD_CAP,
        now=now,
    )


async def backfill(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    """POST: record the backfill whose count the preview showed, with that count as max."""
    ref = TriggerRef(*groups)
    try:
        from_ms, to_ms, count = (int(req.field(n)) for n in ("from_ms", "to_ms", "count"))
    except ValueError:
        return _back(ui, ref, "the backfill form is incomplete: preview it again")
    try:
        result = await admin.backfill(
            _dsn(ui),
            ref,
            start=from_ms,
            end=to_ms,
            max_occurrences=count,
            note=_note(req),
            actor=_actor(req),
        )
    except ControlError as exc:
        return _back(ui, ref, str(exc))
    return _back(ui, ref, record_text(result))


def cancel_text(outcome: CancelOutcome) -> str:
    match outcome:
        case CancelledQueued(run_id=run_id):
            return f"cancelled Run {run_id} (it was queued)"
        case CancelRequested(run_id=run_id):
            return f"asked the worker of Run {run_id} to stop it (at its next heartbeat)"
        case AlreadyFinished(run_id=run_id, state=state):
            return f"Run {run_id} is {state}: nothing changed"
        case UnknownRun(run_id=run_id):
            return f"no Run {run_id}"
        case _:
            assert_never(outcome)


async def cancel_run(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    """POST: cancel a Run through ``qlsched.admin.cancel`` (queued: at once; running: its
    worker stops the job at its next heartbeat), audited with the signed-in user."""
    run_id = groups[0]
    try:
        outcome = await admin.cancel(_dsn(ui), run_id, note=_note(req), actor=_actor(req))
    except ControlError as exc:
        return ui.back(f"/runs/{run_id}", str(exc))
    return ui.back(f"/runs/{run_id}", cancel_text(outcome))


async def _matching(ui: Dashboard, req: Request) -> tuple[dict[str, str], list[TriggerRef]]:
    """The filter's schedules, up to BULK_MAX + 1 (one more tells "too many"), walked page
    by page to the end of the key range."""
    flt = schedule_filter(req)
    refs: list[TriggerRef] = []
    after: tuple[str, str] | None = ("", "")
    while after is not None and len(refs) <= BULK_MAX:
        page = await schedule_page(ui, flt, after, BULK_MAX + 1 - len(refs))
        refs += [TriggerRef(r.project_id, r.trigger_id) for r in page.rows]
        after = page.resume
    return flt, refs


async def bulk_preview(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    """GET: how many schedules the filter matches, and the form that pauses or resumes them."""
    flt, refs = await _matching(ui, req)
    kind = "resume" if req.arg("action") == "resume" else "pause"
    return ui.page(
        req,
        "bulk.html",
        title=f"Bulk {kind}",
        flt=flt,
        kind=kind,
        refs=refs[:BULK_MAX],
        too_many=len(refs) > BULK_MAX,
        bulk_max=BULK_MAX,
        now=None,
        flash=ui.flash(req),
    )


async def bulk(ui: Dashboard, req: Request, groups: tuple[str, ...]) -> Response:
    """POST: pause or resume every schedule the filter matches, one audited action each,
    on one admin connection. Refused when the filter now matches another count."""
    flt, refs = await _matching(ui, req)
    if len(refs) > BULK_MAX or str(len(refs)) != req.field("count"):
        message = f"the filter now matches {len(refs)} schedules: review them again"
        return ui.back("/schedules/bulk", message, action=req.field("kind"), **flt)
    kind = "resume" if req.field("kind") == "resume" else "pause"
    try:
        note, actor = _note(req), _actor(req)
    except ControlError as exc:
        return ui.refuse(req, 400, str(exc))
    catch_up = _catch_up(req.field("catch_up"))

    async def fn(conn: Connection) -> int:
        changed = 0
        for ref in refs:
            if kind == "pause":
                out: PauseOutcome | ResumeOutcome = await control.pause(
                    conn, ref, note=note, actor=actor
                )
            else:
                out = await control.resume(conn, ref, catch_up=catch_up, actor=actor, note=note)
            changed += isinstance(out, Paused | Resumed)
        return changed

    try:
        changed = await as_admin(_dsn(ui), kind, fn)
    except WrongRole as exc:
        return ui.refuse(req, 500, str(exc))
    verb = "paused" if kind == "pause" else "resumed"
    message = f"{verb} {changed} of {len(refs)} schedules (the others were {verb} already)"
    return ui.back("/schedules", message, **flt)
