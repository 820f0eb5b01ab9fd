"""Requests, responses and the headers every dashboard response carries.

The Content-Security-Policy allows nothing from another origin and nothing inline: styles,
images and the one script come from the dashboard itself, forms post only to it, and no
other site may frame it. Pages are never cached (they show live state and CSRF tokens).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, quote

import msgspec

from qlsched.ui.security import Identity

CSP: Final = (
    "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
HTML: Final = b"text/html; charset=utf-8"
TEXT: Final = b"text/plain; charset=utf-8"
FORM_MAX_BYTES: Final = 64 * 1024


class Request(msgspec.Struct, frozen=True):
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    who: Identity
    form: dict[str, str] = msgspec.field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, default).strip()

    def field(self, name: str, default: str = "") -> str:
        return self.form.get(name, default)


class Response(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    content_type: bytes = HTML
    headers: tuple[tuple[bytes, bytes], ...] = ()


def text(status: int, message: str) -> Response:
    return Response(status, (message + "\n").encode(), TEXT)


def redirect(location: str) -> Response:
    """303 See Other: the browser GETs ``location`` (post, redirect, get)."""
    return Response(303, b"", TEXT, ((b"location", location.encode("ascii")),))


def parse_pairs(raw: str) -> dict[str, str]:
    """A query string or form body; a repeated name keeps its last value."""
    return dict(parse_qsl(raw, keep_blank_values=True, max_num_fields=64))


def url(path: str, **params: str | int | None) -> str:
    """``path`` with its non-empty parameters, every part percent-encoded."""
    pairs = [
        f"{quote(k)}={quote(str(v), safe='')}" for k, v in params.items() if v not in (None, "")
    ]
    return path + ("?" + "&".join(pairs) if pairs else "")
