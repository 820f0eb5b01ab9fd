"""The dashboard in a real browser (Playwright driving Debian's chromium) against a real
database with a real replica (``qlsched run``) and ``qlsched ui``, each its own process.

What a click does is checked in the database, not on the page: a pause pauses the row and
leaves an audit row with the signed-in user; a backfill shows the exact count before it is
recorded and the replica then admits exactly those Runs. Every request the browser makes
is to the dashboard's own origin and the Content-Security-Policy is never violated.

``QLSCHED_UI_SCREENSHOTS=DIR`` also saves the main pages as PNG (the README's pictures).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import BrowserContext, ConsoleMessage, Page, expect

from qlsched.admin import sync
from tests.ui.site import Site, query

SHOTS = os.environ.get("QLSCHED_UI_SCREENSHOTS")


def wait_for(probe: Callable[[], bool], *, timeout_s: float = 60) -> None:
    """Poll ``probe`` (a database read) until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.1)


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"ui-{name}.png"), full_page=True)


def watch(context: BrowserContext, site: Site) -> tuple[list[str], list[str]]:
    """Every URL the browser requests, and every console error (a CSP violation is one)."""
    urls: list[str] = []
    errors: list[str] = []
    context.on("request", lambda r: urls.append(r.url))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    context.on("console", console)
    return urls, errors


def test_every_page_loads_same_origin_only_without_csp_errors(
    site: Site, admin_context: BrowserContext
) -> None:
    """Rule: the overview, schedules (filtered and paged), one schedule, runs, one Run,
    requests and audit pages render for a signed-in user; every request the browser makes
    (pages, stylesheet, script, icon) goes to the dashboard's own origin, and no page
    violates the Content-Security-Policy (no inline style or script, nothing foreign)."""
    urls, errors = watch(admin_context, site)
    page = admin_context.new_page()
    page.goto("/")
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator(".who")).to_contain_text("alice")
    page.click("nav >> text=Schedules")
    expect(page.locator("table.schedules tbody tr")).to_have_count(12)
    page.fill("input[name=q]", "reports-0")
    page.click("form.filter button")
    expect(page.locator("table.schedules tbody tr")).to_have_count(6)
    page.goto("/schedules")
    page.click("text=billing/billing-05")
    expect(page.locator("h1")).to_contain_text("billing/billing-05")
    expect(page.locator("svg.timeline circle.next")).to_have_count(10)
    for _name, title in (("runs", "Runs"), ("requests", "Requests"), ("audit", "Audit")):
        page.click(f"nav >> text={title}")
        expect(page.locator("h1")).to_contain_text(title)
    assert urls, "the browser made no request"
    foreign = [u for u in urls if not u.startswith(site.base + "/")]
    assert foreign == []
    assert errors == []


def test_a_click_on_pause_pauses_the_row_and_records_the_user(
    site: Site, admin_context: BrowserContext
) -> None:
    """Rule: Pause with a note pauses the schedule row in the database, with one
    ``schedule_actions`` row whose actor is the signed-in user and whose note is the one
    typed; the note is shown escaped (markup in it stays text). Resume with the catch-up
    choice resumes it and records that choice."""
    page = admin_context.new_page()
    page.goto("/schedules/billing/billing-01")
    note = "<b>migrating</b> the ledger"
    page.fill("form[action$='/pause'] input[name=note]", note)
    page.click("form[action$='/pause'] button")
    expect(page.locator(".flash")).to_contain_text("paused billing/billing-01")
    [row] = query(
        site.db,
        "SELECT paused_at_ms, pause_note, active FROM qlsched.trigger_schedules"
        " WHERE trigger_id = 'billing-01'",
    )
    assert row["paused_at_ms"] is not None
    assert row["pause_note"] == note
    assert not row["active"]
    [action] = query(
        site.db,
        "SELECT kind, actor, actor_label, note FROM qlsched.schedule_actions"
        " WHERE trigger_id = 'billing-01'",
    )
    assert (action["kind"], action["actor"], action["actor_label"], action["note"]) == (
        "pause",
        "qlsched_admin",
        "alice",
        note,
    )
    expect(page.locator("q.note").first).to_have_text(note)
    assert page.locator("main b").count() == 0
    page.fill("form[action$='/resume'] input[name=note]", "ledger done")
    page.select_option("form[action$='/resume'] select[name=catch_up]", "fire_once")
    page.click("form[action$='/resume'] button")
    expect(page.locator(".flash")).to_contain_text("resumed billing/billing-01")
    [resumed] = query(
        site.db,
        "SELECT detail->>'catch_up' AS catch_up, actor_label, note FROM"
        " qlsched.schedule_actions WHERE trigger_id = 'billing-01' AND kind = 'resume'",
    )
    assert (resumed["catch_up"], resumed["actor_label"], resumed["note"]) == (
        "fire_once",
        "alice",
        "ledger done",
    )
    paused = query(
        site.db,
        "SELECT paused_at_ms FROM qlsched.trigger_schedules WHERE trigger_id = 'billing-01'",
    )
    assert paused == [{"paused_at_ms": None}]


def test_a_backfill_shows_its_count_then_the_replica_admits_those_runs(
    site: Site, admin_context: BrowserContext
) -> None:
    """Rule: a backfill range is counted exactly before anything is written (5 daily
    occurrences, nothing recorded yet); recording it makes one request of that total with
    the user as actor, and the running replica admits exactly those 5 Runs under their cron
    keys; the requests page shows the progress."""
    page = admin_context.new_page()
    page.goto("/schedules/reports/reports-02")
    page.fill("input[name=from]", "2026-03-01T00:00:00")
    page.fill("input[name=to]", "2026-03-05T23:59:59")
    page.click("text=Count occurrences")
    expect(page.locator("[data-count]")).to_have_text("5")
    shot(page, "backfill")
    assert (
        query(site.db, "SELECT 1 FROM qlsched.control_requests WHERE trigger_id = 'reports-02'")
        == []
    )
    page.click("text=Record the backfill of 5 Runs")
    expect(page.locator(".flash")).to_contain_text("backfill recorded for 5 occurrence(s)")
    [request] = query(
        site.db,
        "SELECT total, actor FROM qlsched.control_requests WHERE trigger_id = 'reports-02'",
    )
    assert (request["total"], request["actor"]) == (5, "alice")

    def runs() -> list[dict[str, object]]:
        return query(
            site.db,
            "SELECT idempotency_key FROM qlsched.runs WHERE trigger_id = 'reports-02'"
            " ORDER BY scheduled_for_ms",
        )

    wait_for(lambda: len(runs()) >= 5)
    keys = [str(r["idempotency_key"]) for r in runs()]
    assert len(keys) == 5
    assert all(k.startswith("ql3:cron:v1:reports-02:") for k in keys)
    page.goto("/requests")
    expect(page.locator("table.requests")).to_contain_text("5/5")
    shot(page, "requests")
    page.goto("/schedules/reports/reports-02")
    expect(page.locator("table.runs tbody tr")).to_have_count(5)
    expect(page.locator("text=5 older Runs")).to_be_visible()


def test_trigger_now_and_bulk_pause_act_on_the_database(
    site: Site, admin_context: BrowserContext
) -> None:
    """Rule: Trigger now records a request that the replica turns into one manual Run; a
    bulk pause shows how many schedules the filter matches and pauses exactly those, each
    with its own audit row by the signed-in user."""
    page = admin_context.new_page()
    page.goto("/schedules/billing/billing-03")
    page.click("form[action$='/trigger'] button")
    expect(page.locator(".flash")).to_contain_text("trigger-now recorded")
    manual = "SELECT 1 FROM qlsched.runs WHERE idempotency_key LIKE 'ql3:manual:v1:billing-03:%'"
    wait_for(lambda: len(query(site.db, manual)) == 1)
    page.reload()
    expect(page.locator("svg.timeline circle.run")).to_have_count(1)
    shot(page, "schedule")
    page.goto("/schedules?q=reports-0&state=active")
    page.click("text=Pause all")
    expect(page.locator("[data-count]")).to_have_text("6")
    page.fill("input[name=note]", "freeze")
    page.click("text=Pause 6 schedules")
    expect(page.locator(".flash")).to_contain_text("paused 6 of 6")
    paused = query(
        site.db,
        "SELECT a.trigger_id FROM qlsched.schedule_actions AS a JOIN qlsched.trigger_schedules"
        " AS s USING (project_id, trigger_id) WHERE a.kind = 'pause' AND a.note = 'freeze'"
        " AND a.actor_label = 'alice' AND s.paused_at_ms IS NOT NULL",
    )
    assert sorted(r["trigger_id"] for r in paused) == [f"reports-{i:02d}" for i in range(6)]
    page.goto("/runs")
    expect(page.locator("table.runs")).to_contain_text("manual")
    page.click("table.runs tbody tr >> nth=0 >> a >> nth=0")
    expect(page.locator("h2", has_text="Events")).to_be_visible()
    shot(page, "run")
    page.goto("/audit")
    shot(page, "audit")
    page.goto("/schedules")
    shot(page, "schedules")
    page.goto("/")
    expect(page.locator("text=replica-1")).to_be_visible()
    shot(page, "overview")


def test_a_viewer_sees_no_controls_and_may_not_post(
    site: Site, viewer_context: BrowserContext
) -> None:
    """Rule: signed in with the viewer token the pages show no control form, and a POST
    made anyway is refused (403) with the row unchanged."""
    page = viewer_context.new_page()
    page.goto("/schedules/billing/billing-04")
    expect(page.locator("h1")).to_contain_text("billing/billing-04")
    assert page.locator("form[method=post]").count() == 0
    response = page.request.post(
        f"{site.base}/schedules/billing/billing-04/pause",
        form={"note": "x", "csrf": "0" * 64},
        headers={"Origin": site.base},
    )
    assert response.status == 403
    row = query(
        site.db,
        "SELECT paused_at_ms FROM qlsched.trigger_schedules WHERE trigger_id = 'billing-04'",
    )
    assert row == [{"paused_at_ms": None}]
    assert re.search("viewer", page.locator(".who").inner_text())


def test_the_controls_work_with_javascript_off(
    site: Site, no_script_context: BrowserContext
) -> None:
    """Rule: with JavaScript off, every page still renders and a Pause click still pauses
    the row: the pages are plain HTML forms and links."""
    page = no_script_context.new_page()
    page.goto("/schedules?project=billing")
    page.click("text=billing/billing-00")
    page.click("form[action$='/pause'] button")
    expect(page.locator(".flash")).to_contain_text("paused billing/billing-00")
    row = query(
        site.db,
        "SELECT paused_at_ms IS NOT NULL AS paused FROM qlsched.trigger_schedules"
        " WHERE trigger_id = 'billing-00'",
    )
    assert row == [{"paused": True}]


def test_the_overview_refreshes_itself_with_the_small_script(
    site: Site, admin_context: BrowserContext
) -> None:
    """Rule: with JavaScript on, the overview fetches itself (same origin) every 10 s and
    shows the new figures without a reload: a Run admitted meanwhile is counted."""
    page = admin_context.new_page()
    page.clock.install()
    page.goto("/")
    sync.trigger_now(site.db.admin_dsn, "billing/billing-02", actor="refresh-test")
    manual = "SELECT 1 FROM qlsched.runs WHERE idempotency_key LIKE 'ql3:manual:v1:billing-02:%'"
    wait_for(lambda: len(query(site.db, manual)) == 1)
    [counted] = query(
        site.db,
        "SELECT count(*) AS n FROM (SELECT admitted_by_owner FROM qlsched.runs ORDER BY"
        " created_at_ms DESC LIMIT 1000) AS l WHERE admitted_by_owner = 'replica-1'",
    )
    cell = page.locator("main table tbody tr", has_text="replica-1").locator("td").nth(1)
    page.clock.run_for(11_000)
    expect(cell).to_have_text(str(counted["n"]))
