"""``edge run --http``: /healthz, /readyz and /metrics over Trio's own ``serve_tcp``.

A minimal HTTP/1.0 responder (one request per connection, GET only, 8 KiB of headers at
most, 5 s to send them) instead of hypercorn, so the Edge process loads no HTTP framework;
within the limits of ``qlsched.http_limits`` (connections, requests a second, bounded sends,
``/metrics`` rendered once a second at most).
Readiness is 503 until the scheduler runs its rounds and again once it stops.
"""

from __future__ import annotations

from typing import Final

import trio

from qlsched.core.config import ConfigError
from qlsched.http_limits import METRICS_TTL_S, BoundedStream, RequestRate, serve_bounded
from qlsched.sqlite.errors import EdgeError
from qlsched.sqlite.scheduler import EdgeScheduler

MAX_HEAD: Final = 8192
HEAD_TIMEOUT_S: Final = 5.0
_REASONS: Final = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Unavailable"}


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); ``ConfigError`` (exit 2) otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--http={text}: expected HOST:PORT")
    return host.strip("[]"), int(port)


async def _respond(stream: trio.abc.Stream, status: int, body: str, ctype: str) -> None:
    data = body.encode("utf-8")
    head = (
        f"HTTP/1.0 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode("ascii") + data)


class _Scrape:
    """The due backlog ``/metrics`` last read and when (Trio's clock): read again only after
    ``METRICS_TTL_S``, so a flood of scrapes reads the file once a second at most (the
    process's own counters are rendered at every scrape)."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.backlog: int | None = None

    async def text_of(self, scheduler: EdgeScheduler) -> str:
        now = trio.current_time()
        if self.at is None or now - self.at >= METRICS_TTL_S:
            try:
                self.backlog = await scheduler.store.due_backlog()
            except EdgeError:
                self.backlog = None
            self.at = now
        return scheduler.metrics.render(self.backlog)


async def _handle(
    stream: trio.abc.Stream, scheduler: EdgeScheduler, rate: RequestRate, scrape: _Scrape
) -> None:
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
    if not await rate.admit():
        await _respond(stream, 503, "busy\n", "text/plain")
    elif method != b"GET":
        await _respond(stream, 405, "GET only\n", "text/plain")
    elif path == b"/healthz":
        await _respond(stream, 200, "ok\n", "text/plain")
    elif path == b"/readyz":
        ready = scheduler.ready
        await _respond(
            stream, 200 if ready else 503, "ready\n" if ready else "not ready\n", "text/plain"
        )
    elif path == b"/metrics":
        await _respond(stream, 200, await scrape.text_of(scheduler), "text/plain; version=0.0.4")
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
    """Serve on ``listeners`` until cancelled, within ``qlsched.http_limits`` (connections,
    requests a second, bounded sends). Ownership: closes the listeners."""
    rate, scrape = RequestRate(), _Scrape()

    async def handler(stream: BoundedStream) -> None:
        async with stream:
            await _handle(stream, scheduler, rate, scrape)

    await serve_bounded(handler, listeners)
