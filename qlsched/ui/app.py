"""The dashboard's ASGI application: sign-in, the POST checks, static files, routing.

Order of checks for every request: the route exists (404), the method is allowed (405),
the caller signed in (401 with a basic challenge, so a browser asks once). A POST then
must come from a signed-in admin (403), from this origin (403), with a form body of at most
64 KiB (413) carrying this caller's CSRF token (403). Only then does a handler run.

Failures behind a page answer 503 (the database did not answer in time) or 500 (a bug) with
a fixed text: no response carries an exception message or a DSN.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Final, TypeVar

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

from qlsched.asgi import HttpApp
from qlsched.postgres.errors import DatabaseUnavailable
from qlsched.postgres.pool import Connection, Database
from qlsched.ui.render import render
from qlsched.ui.security import (
    Csrf,
    Identity,
    Tokens,
    authenticate,
    host_allowed,
    same_origin,
)
from qlsched.ui.web import (
    FORM_MAX_BYTES,
    SECURITY_HEADERS,
    Request,
    Response,
    parse_pairs,
    redirect,
    text,
    url,
)

T = TypeVar("T")
READ_TIMEOUT_S: Final = 10.0
STATIC_TYPES: Final = {
    ".css": b"text/css; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".svg": b"image/svg+xml",
}
Handler = Callable[["Dashboard", Request, tuple[str, ...]], Awaitable[Response]]
Route = tuple[str, re.Pattern[str], Handler]


class Dashboard(HttpApp):
    """What every handler reaches: the observer pool, the admin DSN, sign-in and CSRF.

    Ownership: uses ``db`` (the caller opened it on the observer DSN and closes it); the
    admin DSN is used only by actions, one connection per action (``qlsched.admin``).
    """

    def __init__(
        self,
        *,
        db: Database,
        admin_dsn: str | None,
        tokens: Tokens,
        local_user: str,
        routes: list[Route],
        csrf: Csrf | None = None,
        origin: str | None = None,
    ) -> None:
        self.db = db
        self.admin_dsn = admin_dsn
        self.tokens = tokens
        self.local_user = local_user
        self.csrf = csrf or Csrf()
        self.origin = origin
        self._routes = routes

    async def read(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run a read on the observer pool, bounded in time."""
        with trio.fail_after(READ_TIMEOUT_S):
            return await self.db.run(fn)

    def page(
        self, req: Request, template: str, *, status: int = 200, **context: object
    ) -> Response:
        """A rendered page with what every page needs (the caller, a CSRF token, the nav)."""
        body = render(
            template,
            who=req.who,
            csrf=self.csrf.token(req.who),
            can_act=req.who.admin and self.admin_dsn is not None,
            path=req.path,
            **context,
        )
        return Response(status, body)

    def back(self, path: str, message: str, **params: str) -> Response:
        """303 to ``path`` (with ``params``) showing ``message``, sealed by this process."""
        return redirect(url(path, **params, flash=message, seal=self.csrf.seal(message)))

    def flash(self, req: Request) -> str:
        """The message a redirect carried, if this process sealed it."""
        return self.csrf.unseal(req.arg("flash"), req.arg("seal"))

    def refuse(self, req: Request, status: int, message: str) -> Response:
        return self.page(
            req, "message.html", status=status, title="Refused", message=message, now=None
        )

    async def http(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        await _send(scope, send, await self._respond(scope, receive))

    async def _respond(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> Response:
        path, method = scope["path"], scope["method"]
        if path.startswith("/static/") and method in ("GET", "HEAD"):
            return _static(path.removeprefix("/static/"))
        found = self._route(method, path)
        if isinstance(found, Response):
            return found
        handler, groups = found
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not host_allowed(headers.get("host"), self.tokens, self.origin):
            return text(421, "this dashboard answers on its loopback address only")
        who = authenticate(headers.get("authorization"), self.tokens, self.local_user)
        if who is None:
            challenge = ((b"www-authenticate", b'Basic realm="qlsched", charset="UTF-8"'),)
            return Response(401, b"sign in with the viewer or admin token\n", headers=challenge)
        query = parse_pairs(scope["query_string"].decode("latin-1"))
        req = Request(method, path, query, headers, who)
        if method == "POST":
            checked = await self._checked_post(req, scope, receive)
            if isinstance(checked, Response):
                return checked
            req = checked
        try:
            return await handler(self, req, groups)
        except (TimeoutError, DatabaseUnavailable):
            return self.refuse(req, 503, "the database did not answer; try again")
        except Exception as exc:
            # A bug or a refusal nobody expected: the class goes to stderr (never the
            # message, which may quote data), the browser gets a fixed text.
            sys.stderr.write(f"qlsched ui: {method} {path} failed: {type(exc).__name__}\n")
            sys.stderr.flush()
            return text(500, "internal error (the dashboard's stderr names it)")

    def _route(self, method: str, path: str) -> tuple[Handler, tuple[str, ...]] | Response:
        allowed: list[str] = []
        for verb, pattern, handler in self._routes:
            m = pattern.fullmatch(path)
            if m is None:
                continue
            if verb == method or (verb == "GET" and method == "HEAD"):
                return handler, m.groups()
            allowed.append(verb)
        if not allowed:
            return text(404, "not found")
        return Response(
            405, b"method not allowed\n", headers=((b"allow", ", ".join(allowed).encode()),)
        )

    async def _checked_post(
        self, req: Request, scope: HTTPScope, receive: ASGIReceiveCallable
    ) -> Request | Response:
        if not req.who.admin or self.admin_dsn is None:
            return text(403, "actions need the admin token")
        if not same_origin(req.headers, self.origin):
            return text(403, "cross-origin request refused")
        kind = req.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return text(415, "a form body is expected")
        body = await _read_body(receive, FORM_MAX_BYTES)
        if body is None:
            return text(413, "the form is too large")
        form = parse_pairs(body.decode("utf-8", errors="replace"))
        if not self.csrf.valid(req.who, form.get("csrf")):
            return text(403, "the form's CSRF token is missing or not valid: reload the page")
        return Request(req.method, req.path, req.query, req.headers, req.who, form)


async def _read_body(receive: ASGIReceiveCallable, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _static(name: str) -> Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in STATIC_TYPES:
        return text(404, "not found")
    item = resources.files("qlsched.ui").joinpath("static").joinpath(name)
    if not item.is_file():
        return text(404, "not found")
    cache = ((b"cache-control", b"public, max-age=3600"),)
    return Response(200, item.read_bytes(), STATIC_TYPES[suffix], cache)


async def _send(scope: HTTPScope, send: ASGISendCallable, response: Response) -> None:
    names = {name for name, _ in response.headers}
    headers = [
        (b"content-type", response.content_type),
        (b"content-length", str(len(response.body)).encode()),
        *SECURITY_HEADERS,
        *response.headers,
    ]
    if b"cache-control" not in names:
        headers.append((b"cache-control", b"no-store"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    body = b"" if scope["method"] == "HEAD" else response.body
    await send({"type": "http.response.body", "body": body, "more_body": False})


def route(verb: str, pattern: str, handler: Handler) -> Route:
    return verb, re.compile(pattern), handler


__all__ = ["Dashboard", "Identity", "Route", "route"]
