"""``edge run --http``: /healthz, /readyz and /metrics over Trio's own ``serve_tcp``.

A minimal HTTP/1.0 responder (one request per connection, GET only, 8 KiB of headers at
most, 5 s to send them) instead of hypercorn, so the Edge process loads no HTTP framework.
Readiness is 503 until the scheduler runs its rounds and again once it stops.
"""

from __future__ import annotations

from typing import Final

import trio

from qlsched.core.address import parse_host_port
from qlsched.core.config import ConfigError
from qlsched.edge.scheduler import EdgeScheduler
from qlsched.sqlite.errors import EdgeError

MAX_HEAD: Final = 8192
HEAD_TIMEOUT_S: Final = 5.0
_REASONS: Final = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Unavailable"}


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); ``ConfigError`` (exit 2) otherwise."""
    address = parse_host_port(text)
    if address is None:
        raise ConfigError(f"--http={text}: expected HOST:PORT")
    return address


async def _respond(stream: trio.abc.Stream, status: int, body: str, ctype: str) -> None:
    data = body.encode("utf-8")
    head = (
        f"HTTP/1.0 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode("ascii") + data)


async def _handle(stream: trio.abc.Stream, scheduler: EdgeScheduler) -> None:
    head = b""
    with trio.move_on_after(HEAD_TIMEOUT_S):
        while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < MAX_HEAD:
            chunk = await stream.receive_some(MAX_HEAD)
            if not chunk:
                break
            head += chunk
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) < 2:
        return
    method, path = parts[0], parts[1].split(b"?", 1)[0]
    if method != b"GET":
        await _respond(stream, 405, "GET only\n", "text/plain")
    elif path == b"/healthz":
        await _respond(stream, 200, "ok\n", "text/plain")
    elif path == b"/readyz":
        ready = scheduler.ready
        await _respond(
            stream, 200 if ready else 503, "ready\n" if ready else "not ready\n", "text/plain"
        )
    elif path == b"/metrics":
        try:
            backlog: int | None = await scheduler.store.due_backlog()
        except EdgeError:
            backlog = None
        await _respond(stream, 200, scheduler.metrics.render(backlog), "text/plain; version=0.0.4")
    else:
        await _respond(stream, 404, "not found\n", "text/plain")


async def open_http_listeners(host: str, port: int) -> list[trio.SocketListener]:
    """Bind before serving, so a taken port is one clear error (exit 1), not a task failure.

    Raises:
        EdgeError: the address cannot be bound.
    """
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise EdgeError(f"--http {host}:{port}: cannot listen ({exc.strerror})") from None


def bound_address(listeners: list[trio.SocketListener]) -> tuple[str, int]:
    sockname = listeners[0].socket.getsockname()
    return str(sockname[0]), int(sockname[1])


async def serve_http(scheduler: EdgeScheduler, listeners: list[trio.SocketListener]) -> None:
    """Serve on ``listeners`` until cancelled. Ownership: closes the listeners."""

    async def handler(stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await _handle(stream, scheduler)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    await trio.serve_listeners(handler, listeners)
