"""The dashboard's refusals over plain HTTP (no browser needed to forge a request): no or
a wrong token, a viewer's POST, a form without this caller's CSRF token, a POST from another
origin; and the headers every response carries. A refused POST changes nothing."""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Final

from qlsched.ui.web import CSP
from tests.integration.schema_support import run_cli
from tests.ui.site import ADMIN, VIEWER, Site, process, query

TARGET: Final = "/schedules/billing/billing-02"


def basic(user: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def call(
    site: Site,
    path: str,
    *,
    auth: str | None = None,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    data = None if form is None else urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(site.base + path, data=data, headers=headers or {})
    if auth is not None:
        request.add_header("Authorization", auth)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def paused(site: Site) -> bool:
    [row] = query(
        site.db,
        "SELECT paused_at_ms FROM qlsched.trigger_schedules WHERE trigger_id = 'billing-02'",
    )
    return row["paused_at_ms"] is not None


def csrf_of(site: Site, auth: str) -> str:
    status, _, body = call(site, TARGET, auth=auth)
    assert status == 200
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', body)
    assert found is not None
    return found.group(1)


def test_sign_in_is_required_and_wrong_tokens_are_refused(site: Site) -> None:
    """Rule: with tokens configured a page without credentials, with a wrong token (basic
    or bearer) or an unknown scheme answers 401 with a basic challenge; the viewer and the
    admin token open it, by basic or bearer."""
    for auth in (None, basic("alice", "wrong"), "Bearer wrong", f"Token {ADMIN}"):
        status, headers, _ = call(site, "/", auth=auth)
        assert status == 401, auth
        assert headers["www-authenticate"].startswith("Basic realm=")
    for auth in (basic("v", VIEWER), basic("a", ADMIN), f"Bearer {VIEWER}", f"Bearer {ADMIN}"):
        assert call(site, "/", auth=auth)[0] == 200


def test_every_response_carries_a_strict_csp(site: Site) -> None:
    """Rule: pages, assets and refusals carry the Content-Security-Policy (nothing from
    another origin, nothing inline, no framing), nosniff and no-store on pages."""
    for path, auth in (("/", basic("a", ADMIN)), ("/static/ui.css", None), ("/", None)):
        _, headers, _ = call(site, path, auth=auth)
        assert headers["content-security-policy"] == CSP
        assert headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in CSP
    assert "frame-ancestors 'none'" in CSP
    assert "unsafe-inline" not in CSP
    assert call(site, "/", auth=basic("a", ADMIN))[1]["cache-control"] == "no-store"


def test_posts_need_the_admin_the_origin_and_the_csrf_token(site: Site) -> None:
    """Rule: a pause POST is refused (403) from a viewer, without or with another caller's
    CSRF token, from another origin or with no origin at all; the row stays unpaused. With
    the admin token, this origin and the caller's own token it pauses (303 back)."""
    admin, viewer = basic("alice", ADMIN), basic("victor", VIEWER)
    token = csrf_of(site, admin)
    origin = {"Origin": site.base}
    other_user = csrf_of(site, basic("mallory", ADMIN))
    refused = [
        (viewer, {"csrf": token}, origin),
        (admin, {}, origin),
        (admin, {"csrf": "0" * 64}, origin),
        (admin, {"csrf": other_user}, origin),
        (admin, {"csrf": token}, {"Origin": "http://evil.example"}),
        (admin, {"csrf": token}, {"Referer": "http://evil.example/x"}),
        (admin, {"csrf": token}, {"Origin": site.base, "Sec-Fetch-Site": "cross-site"}),
        (admin, {"csrf": token}, {}),
    ]
    for auth, form, headers in refused:
        status, _, _ = call(site, TARGET + "/pause", auth=auth, form=form, headers=headers)
        assert status == 403, (form, headers)
    assert not paused(site)
    status, headers, _ = call(
        site, TARGET + "/pause", auth=admin, form={"csrf": token, "note": "ok"}, headers=origin
    )
    assert status == 303
    assert headers["location"].startswith(TARGET + "?flash=paused")
    assert paused(site)
    shown = call(site, headers["location"], auth=admin)[2]
    assert re.search(r'class="flash"[^>]*>paused billing/billing-02', shown)


def test_a_crafted_message_link_shows_nothing(site: Site) -> None:
    """Rule: the one-line message after an action is shown only when this process sealed
    it: a link carrying any other text (or a forged seal) shows no message."""
    crafted = "/schedules/billing/billing-01?flash=Call%20+1-555%20now&seal=" + "0" * 64
    status, _, body = call(site, crafted, auth=basic("a", ADMIN))
    assert status == 200
    assert "555" not in body
    assert 'class="flash"' not in body


def test_a_non_loopback_address_is_refused_without_tokens() -> None:
    """Rule: `qlsched ui --http 0.0.0.0:PORT` without a token exits 2 with one line naming
    the variables to set, before anything connects."""
    result = run_cli(["ui", "--http", "0.0.0.0:8080", "--dsn", "postgresql://x@127.0.0.1:1/x"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "QLSCHED_UI_ADMIN_TOKEN" in result.stderr
    bad = run_cli(["ui", "--http", "nowhere"])
    assert (bad.returncode, bad.stderr.count("\n")) == (2, 1)


def test_the_dsns_must_log_in_as_their_roles(site: Site) -> None:
    """Rule: `qlsched ui` refuses an observer DSN that logs in as another role, and an
    admin DSN that is not the admin role's, with one line naming the role (exit 2), before
    it listens."""
    admin_as_reader = run_cli(["ui", "--dsn", site.db.admin_dsn, "--http", "127.0.0.1:0"])
    assert admin_as_reader.returncode == 2
    assert "needs qlsched_observer" in admin_as_reader.stderr
    observer_as_admin = run_cli(
        [
            "ui",
            "--dsn",
            site.db.observer_dsn,
            "--admin-dsn",
            site.db.observer_dsn,
            "--http",
            "127.0.0.1:0",
        ]
    )
    assert observer_as_admin.returncode == 2
    assert "needs qlsched_admin" in observer_as_admin.stderr
    for result in (admin_as_reader, observer_as_admin):
        assert "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1


def test_without_tokens_another_host_name_gets_nothing(site: Site) -> None:
    """Rule: a dashboard without tokens (loopback only) answers a request naming another
    Host with 421 and nothing else, so a site rebound to 127.0.0.1 can neither read pages
    (and their CSRF tokens) nor act; its own address is served, to the local account."""
    ui = ["ui", "--dsn", site.db.observer_dsn, "--admin-dsn", site.db.admin_dsn]
    with process([*ui, "--http", "127.0.0.1:0"], {}, r"qlsched ui: (http://[^/]+)/") as m:
        local = Site(db=site.db, base=m.group(1))
        assert call(local, "/")[0] == 200
        for path in ("/", TARGET):
            status, _, body = call(local, path, headers={"Host": "evil.example"})
            assert status == 421
            assert "csrf" not in body
        status, _, _ = call(
            local,
            TARGET + "/pause",
            form={"csrf": "0" * 64},
            headers={"Host": "evil.example", "Origin": "http://evil.example"},
        )
        assert status == 421
