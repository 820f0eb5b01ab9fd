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


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    # trio-asyncio (imported by qlsched) makes every new asyncio loop one of its own, which
    # Playwright's sync API cannot drive: it gets a plain selector loop of its own instead.
    with mock.patch("asyncio.new_event_loop", asyncio.SelectorEventLoop):
        manager = sync_playwright()
        p = manager.__enter__()
    try:
        yield p
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    # --no-sandbox: the tests may run as root (CI does), where chromium's sandbox refuses.
    b = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
    try:
        yield b
    finally:
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
