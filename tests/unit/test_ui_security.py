"""The dashboard's sign-in, CSRF and origin rules as pure functions (``qlsched.ui.security``)."""

from __future__ import annotations

import base64

from qlsched.ui.security import (
    Csrf,
    Identity,
    Tokens,
    authenticate,
    host_allowed,
    is_loopback,
    same_origin,
)

TOKENS = Tokens(viewer="v-token", admin="a-token")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_basic_user_name_is_the_actor_and_the_token_the_role() -> None:
    """Rule: basic sign-in names the actor by its user name and gets the role of the token
    given as password; bearer gets the role's name; anything else is no sign-in."""
    assert authenticate(basic("alice", "a-token"), TOKENS, "me") == Identity("alice", "admin")
    assert authenticate(basic("bob", "v-token"), TOKENS, "me") == Identity("bob", "viewer")
    assert authenticate(basic("", "v-token"), TOKENS, "me") == Identity("viewer", "viewer")
    assert authenticate("Bearer a-token", TOKENS, "me") == Identity("admin", "admin")
    for header in (None, basic("a", "v-tok"), "Bearer", "Basic !!!", basic("a\x00b", "a-token")):
        assert authenticate(header, TOKENS, "me") is None


def test_without_tokens_everyone_is_the_local_admin() -> None:
    """Rule: with no token configured (loopback only) the caller is an admin named after
    the account the dashboard runs as, whatever it sends."""
    assert authenticate(None, Tokens(), "kim") == Identity("kim", "admin")
    assert authenticate(basic("x", "y"), Tokens(), "kim") == Identity("kim", "admin")


def test_csrf_tokens_are_bound_to_the_caller_and_the_process() -> None:
    """Rule: a CSRF token is valid only for the identity it was made for and only in the
    process (key) that made it."""
    one, two = Csrf(b"k" * 32), Csrf(b"j" * 32)
    alice, bob = Identity("alice", "admin"), Identity("bob", "admin")
    assert one.valid(alice, one.token(alice))
    assert not one.valid(bob, one.token(alice))
    assert not two.valid(alice, one.token(alice))
    assert not one.valid(alice, None)


def test_same_origin_wants_this_host_in_origin_or_referer() -> None:
    """Rule: a POST is same-origin when Origin (else Referer) is the published origin, or
    http:// and this Host without one, and Sec-Fetch-Site, when sent, says same-origin;
    with neither header it is refused."""
    here = {"host": "127.0.0.1:8080"}
    assert same_origin({**here, "origin": "http://127.0.0.1:8080"}, None)
    assert same_origin({**here, "referer": "http://127.0.0.1:8080/schedules"}, None)
    assert not same_origin({**here, "origin": "https://127.0.0.1:8080"}, None)
    assert not same_origin({**here, "origin": "http://evil:8080"}, None)
    assert not same_origin({**here, "referer": "http://evil/"}, None)
    assert not same_origin(here, None)
    assert not same_origin(
        {**here, "origin": "http://127.0.0.1:8080", "sec-fetch-site": "same-site"}, None
    )
    proxied = {"host": "10.0.0.5:8080", "origin": "https://sched.example.com"}
    assert same_origin(proxied, "https://sched.example.com/")
    assert not same_origin(proxied, None)


def test_loopback_addresses() -> None:
    """Rule: localhost, 127.0.0.0/8 and ::1 are loopback; any other address or name is not."""
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.3.4.5", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))


def test_messages_show_only_with_this_process_seal() -> None:
    """Rule: a redirect's message is shown only with the seal this process made for it."""
    one, two = Csrf(b"k" * 32), Csrf(b"j" * 32)
    assert one.unseal("paused p/t", one.seal("paused p/t")) == "paused p/t"
    assert one.unseal("paused p/x", one.seal("paused p/t")) == ""
    assert two.unseal("paused p/t", one.seal("paused p/t")) == ""
    assert one.unseal("anything", "") == ""


def test_without_tokens_only_loopback_hosts_are_served() -> None:
    """Rule: without tokens a request is served only for a loopback Host (or the --origin's
    host), so a rebinding site's name pointed at 127.0.0.1 gets nothing; with tokens any
    Host is served (the browser holds no credentials for that other origin)."""
    none = Tokens()
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost"):
        assert host_allowed(host, none, None), host
    for host in ("evil.example:8080", "10.0.0.1:8080", None, ""):
        assert not host_allowed(host, none, None), host
    assert host_allowed("sched.example.com", none, "https://sched.example.com")
    assert host_allowed("evil.example:8080", TOKENS, None)
