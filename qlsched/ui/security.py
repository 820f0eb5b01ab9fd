"""Who is asking and whether a form really came from the dashboard.

Sign-in is a token: ``Authorization: Bearer TOKEN``, or HTTP basic with any user name and the
token as password (a browser asks for it once and keeps sending it). The viewer token reads;
the admin token reads and acts. The basic user name is the actor recorded with each action
(``schedule_actions.actor_label``); a bearer caller is recorded as ``viewer`` or ``admin``.
Without any token (allowed on a loopback address only) every caller is an admin named after
the account the dashboard runs as. Tokens are compared in constant time.

Every form carries a CSRF token, an HMAC of the caller's identity under a key drawn when
the process starts (so a token from another process or another user is refused), and every
POST must come from the dashboard's own origin (``Origin``, else ``Referer``; a browser
that sends neither is refused, as is ``Sec-Fetch-Site`` other than same-origin).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from typing import Final, Literal
from urllib.parse import urlsplit

import msgspec

Role = Literal["viewer", "admin"]
ACTOR_MAX: Final = 200


class Identity(msgspec.Struct, frozen=True):
    user: str
    role: Role

    @property
    def admin(self) -> bool:
        return self.role == "admin"


class Tokens(msgspec.Struct, frozen=True):
    """The configured tokens; neither set: no sign-in (loopback only)."""

    viewer: str | None = None
    admin: str | None = None

    @property
    def any(self) -> bool:
        return bool(self.viewer or self.admin)


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(host: str | None, tokens: Tokens, origin: str | None) -> bool:
    """Whether to serve a request for this ``Host``. Without tokens only a loopback name
    is served (or the ``origin``'s host): a page of another site whose name was made to
    resolve to 127.0.0.1 (DNS rebinding) gets nothing, since it could otherwise read the
    pages and their CSRF tokens as its own origin. With tokens any Host is served: the
    browser keeps basic credentials per origin, so such a page has none to send."""
    if tokens.any:
        return True
    if not host:
        return False
    name = urlsplit(f"//{host}").hostname or ""
    if origin and name == (urlsplit(origin).hostname or ""):
        return True
    return is_loopback(name)


def _match(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _role_of(token: str, tokens: Tokens) -> Role | None:
    if _match(token, tokens.admin):
        return "admin"
    if _match(token, tokens.viewer):
        return "viewer"
    return None


def authenticate(authorization: str | None, tokens: Tokens, local_user: str) -> Identity | None:
    """The caller named by an ``Authorization`` header value, or None (sign-in needed)."""
    if not tokens.any:
        return Identity(user=local_user, role="admin")
    if authorization is None:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        role = _role_of(value, tokens)
        return None if role is None else Identity(user=role, role=role)
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        role = _role_of(password, tokens) if sep else None
        if role is None:
            return None
        user = user.strip()[:ACTOR_MAX] or role
        return None if "\x00" in user else Identity(user=user, role=role)
    return None


class Csrf:
    """CSRF tokens bound to a caller's identity and to this process."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def token(self, who: Identity) -> str:
        message = f"{who.role}\x00{who.user}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def valid(self, who: Identity, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token(who).encode())

    def seal(self, message: str) -> str:
        """A signature for a one-line message carried in a redirect's address, so a page
        shows only messages this process wrote (a crafted link shows nothing)."""
        return hmac.new(self._key, b"flash\x00" + message.encode(), hashlib.sha256).hexdigest()

    def unseal(self, message: str, seal: str) -> str:
        """``message`` when ``seal`` is its signature, else ''."""
        return message if hmac.compare_digest(seal.encode(), self.seal(message).encode()) else ""


def same_origin(headers: Mapping[str, str], origin: str | None) -> bool:
    """Whether a POST came from a page of this origin: ``origin`` when the dashboard is
    published under one (behind a TLS proxy: ``https://sched.example.com``), else
    ``http://`` and the request's Host."""
    host = headers.get("host")
    if not host:
        return False
    expected = origin.rstrip("/") if origin else f"http://{host}"
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return False
    given = headers.get("origin")
    if given is not None and given != "null":
        return given == expected
    referer = headers.get("referer")
    if referer is None:
        return False
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" == expected
