"""Fixtures of the browser tests: one chromium per session (Playwright driving Debian's
build by its path), and per module one database with a replica and the dashboard running."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from unittest import mock

import pytest
from playwright.sync_api import Browser, BrowserContext, Playwright, sync_playwright

from tests.support.pg import PgCluster, create_database, drop_database
from tests.ui.browser import chromium_path
from tests.ui.site import ADMIN, VIEWER, Site, publish, running_site

_PLAYWRIGHT_LOOP: list[asyncio.AbstractEventLoop] = []
"""Playwright's loop, once started (see ``_playwright_loop_only_in_browser_tests``)."""


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    # trio-asyncio (imported by qlsched) makes every new asyncio loop one of its own, which
    # Playwright's sync API cannot drive: it gets a plain selector loop of its own instead.
    with mock.patch("asyncio.new_event_loop", asyncio.SelectorEventLoop):
        manager = sync_playwright()
        p = manager.__enter__()
    running = asyncio.events._get_running_loop()
    assert running is not None
    _PLAYWRIGHT_LOOP.append(running)
    try:
        yield p
    finally:
        asyncio.events._set_running_loop(running)
        manager.__exit__(None, None, None)
        asyncio.events._set_running_loop(None)


@pytest.fixture(autouse=True)
def _playwright_loop_only_in_browser_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Playwright's sync API runs its loop in a greenlet of this thread, which leaves
    asyncio's per-thread "running loop" pointing at it between calls. Later tests in the
    same process (xdist runs others after these) would then make trio-asyncio's futures on
    it ("attached to a different loop"). So it is the running loop only around a test that
    drives the browser, and none after."""
    drives = "browser" in request.fixturenames
    if drives and _PLAYWRIGHT_LOOP:
        asyncio.events._set_running_loop(_PLAYWRIGHT_LOOP[0])
    try:
        yield
    finally:
        if drives:
            asyncio.events._set_running_loop(None)


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    # --no-sandbox: the tests may run as root (CI does), where chromium's sandbox refuses.
    b = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
    try:
        yield b
    finally:
        asyncio.events._set_running_loop(_PLAYWRIGHT_LOOP[0])
        b.close()


@pytest.fixture(scope="module")
def site(pg_cluster: PgCluster) -> Iterator[Site]:
    db = create_database(pg_cluster)
    try:
        publish(db)
        with running_site(db) as running:
            yield running
    finally:
        drop_database(db)


def _context(
    browser: Browser, site: Site, user: str, token: str, *, script: bool = True
) -> Iterator[BrowserContext]:
    context = browser.new_context(
        base_url=site.base,
        http_credentials={"username": user, "password": token},
        viewport={"width": 1360, "height": 900},
        java_script_enabled=script,
    )
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def admin_context(browser: Browser, site: Site) -> Iterator[BrowserContext]:
    """Signed in as ``alice`` with the admin token."""
    yield from _context(browser, site, "alice", ADMIN)


@pytest.fixture
def viewer_context(browser: Browser, site: Site) -> Iterator[BrowserContext]:
    yield from _context(browser, site, "victor", VIEWER)


@pytest.fixture
def no_script_context(browser: Browser, site: Site) -> Iterator[BrowserContext]:
    """``alice`` with the admin token, JavaScript off."""
    yield from _context(browser, site, "alice", ADMIN, script=False)
