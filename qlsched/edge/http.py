"""``edge run --http``: /healthz, /readyz, /metrics and /v1/schedules over Trio's own
``serve_tcp``.

``/v1/schedules`` is the cluster's: the rows as JSON in key order, ``?limit=N`` (1..1000)
and keyset pages through ``next_cursor`` / ``?cursor=`` (``qlsched.paging``).

A minimal HTTP/1.0 responder (one request per connection, GET only, 8 KiB of headers at
most, 5 s to send them) instead of hypercorn, so the Edge process loads no HTTP framework;
within the limits of ``qlsched.http_limits`` (connections, requests a second, bounded sends,
``/metrics`` rendered once a second at most).
Readiness is 503 until the scheduler runs its rounds and again once it stops.
"""

from __future__ import annotations

import contextlib
from typing import Final

import msgspec
import trio

from qlsched.edge.scheduler import EdgeScheduler
from qlsched.http_limits import METRICS_TTL_S, BoundedStream, RequestRate, serve_bounded
from qlsched.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from qlsched.metrics import Metrics
from qlsched.paging import cursor_of, limit_of, page_of
from qlsched.sqlite.errors import EdgeError

MAX_HEAD: Final = 8192
HEAD_TIMEOUT_S: Final = 5.0
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Unavailable",
}


async def _respond(stream: trio.abc.Stream, status: int, body: str | bytes, ctype: str) -> None:
    data = body if isinstance(body, bytes) else body.encode("utf-8")
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

    async def text_of(self, scheduler: EdgeScheduler, metrics: Metrics) -> bytes:
        now = trio.current_time()
        if self.at is None or now - self.at >= METRICS_TTL_S:
            with contextlib.suppress(EdgeError):  # the last count stays when the file is busy
                metrics.set_due_backlog(await scheduler.store.due_backlog())
            self.at = now
        return metrics.render()


async def _handle(
    stream: trio.abc.Stream,
    scheduler: EdgeScheduler,
    metrics: Metrics,
    rate: RequestRate,
    scrape: _Scrape,
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
    method, (path, _, query_string) = parts[0], parts[1].partition(b"?")
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
        await _respond(stream, 200, await scrape.text_of(scheduler, metrics), METRICS_CONTENT_TYPE)
    elif path == b"/v1/schedules":
        await _schedules(stream, scheduler, query_string)
    else:
        await _respond(stream, 404, "not found\n", "text/plain")


async def _schedules(
    stream: trio.abc.Stream, scheduler: EdgeScheduler, query_string: bytes
) -> None:
    limit, after = limit_of(query_string), cursor_of(query_string)
    if limit is None:
        await _respond(stream, 400, "limit must be an integer 1..1000\n", "text/plain")
        return
    if after is False:
        text = "cursor must be a next_cursor value (PROJECT/TRIGGER)\n"
        await _respond(stream, 400, text, "text/plain")
        return
    try:
        if after is None:
            rows = await scheduler.store.list_schedules(limit)
        else:
            rows = await scheduler.store.list_schedules_after(after, limit)
    except EdgeError:
        await _respond(stream, 503, "the file cannot be read now\n", "text/plain")
        return
    body = msgspec.json.encode(page_of(rows, limit)).decode()
    await _respond(stream, 200, body, "application/json")


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


async def serve_http(
    scheduler: EdgeScheduler, metrics: Metrics, listeners: list[trio.SocketListener]
) -> None:
    """Serve on ``listeners`` until cancelled, within ``qlsched.http_limits`` (connections,
    requests a second, bounded sends). Ownership: closes the listeners."""
    rate, scrape = RequestRate(), _Scrape()

    async def handler(stream: BoundedStream) -> None:
        async with stream:
            await _handle(stream, scheduler, metrics, rate, scrape)

    await serve_bounded(handler, listeners)
