"""HTTP admission: health, readiness, metrics and the schedule list, on hypercorn's protocol.

Served from the bounded accept loop of ``qlsched.http_limits`` (64 connections, 100
requests a second, bounded sends, every connection closed at stop); ``/metrics`` is
rendered at most once every ``METRICS_TTL_S``.

A plain ASGI callable (no framework) with four GET endpoints:

- ``/healthz``: 200 while the process serves at all;
- ``/readyz``: 200 only while the lifecycle runs and is not stopping, else 503 (starting,
  draining, or admission withdrawn by the composition root);
- ``/metrics``: this replica's Prometheus text; the due-backlog gauge, and the control
  actions' database-wide totals when an ``actions`` reader is given, are refreshed from
  the store once per scrape (bounded by a timeout; on failure the previous value stays);
- ``/v1/schedules``: the schedule rows as JSON in key order (``?limit=N``, 1..1000, default
  1000), each with its pause state and latest actions; a full page carries ``next_cursor``,
  and ``?cursor=`` that value gives the next page (keyset pagination: every row present
  throughout is seen exactly once, however the table changes meanwhile). ``next_cursor`` is
  null on the last page.

Failures behind an endpoint answer 503 and go to the diagnostic sink by code and exception
class; no response body or log line carries an exception message. Hypercorn's own access and
error logs are off for the same reason: stderr belongs to the JSON-lines diagnostic sink.

HTTP can never starve the scheduler: the reader given here is meant to sit on a pool of its
own (``postgres.reader``), whose acquire gives up quickly; a request that finds no free
connection (``TimeoutError``) is counted as ``http_busy`` but not sent to the sink (a flood
would flood it): ``/v1/schedules`` answers 503 at once, ``/metrics`` its local series with
the backlog gauge as it was (a scrape that fails under load would hide the load).

Request bodies are refused (413) unread. With a token, ``/metrics`` and ``/v1/schedules``
need ``Authorization: Bearer TOKEN`` (401 otherwise, compared in constant time);
``/healthz`` and ``/readyz`` stay open for probes.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, TypeVar

import hypercorn.config
import msgspec
import trio
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGISendCallable,
    ConnectionState,
    HTTPScope,
)
from hypercorn.utils import wrap_app

from qlsched.asgi import HttpApp
from qlsched.cluster.lifecycle import Lifecycle
from qlsched.core.diagnostics import DiagnosticSink, from_exception
from qlsched.core.store import ActionTotalsReader, ScheduleReader
from qlsched.http_limits import METRICS_TTL_S, BoundedStream, RequestRate, serve_bounded
from qlsched.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from qlsched.metrics import Metrics
from qlsched.paging import SchedulesPage, cursor_of, limit_of, page_of

T = TypeVar("T")

STORE_TIMEOUT_S: Final = 5.0
"""Bound on the store reads behind ``/metrics`` and ``/v1/schedules``."""

BACKLOG_FAILED: Final = "backlog_failed"
ACTIONS_FAILED: Final = "action_totals_failed"
SCHEDULES_FAILED: Final = "schedules_failed"
HTTP_BUSY: Final = "http_busy"
"""A read refused because the HTTP pool had no free connection (counted, not emitted)."""
PROTECTED: Final = frozenset({"/metrics", "/v1/schedules"})
KEEP_ALIVE_REQUESTS: Final = 100
"""Requests one connection may make before the server closes it."""

_TEXT: Final = b"text/plain; charset=utf-8"
_JSON: Final = b"application/json"


SchedulesResponse = SchedulesPage


class _Response(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    content_type: bytes = _TEXT
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()


class AdmissionApp(HttpApp):
    """The ASGI application of one replica.

    Ownership: reads the lifecycle's readiness, renders ``metrics``, reads ``reader``; owns
    nothing that needs closing. ``withdraw()`` turns readiness off for good (the first step
    of the composition root's stop order, before the listener closes).
    """

    def __init__(
        self,
        *,
        lifecycle: Lifecycle,
        metrics: Metrics,
        reader: ScheduleReader,
        sink: DiagnosticSink,
        replica: str = "",
        store_timeout_s: float = STORE_TIMEOUT_S,
        token: str | None = None,
        actions: ActionTotalsReader | None = None,
        rate: RequestRate | None = None,
    ) -> None:
        self._lifecycle = lifecycle
        self._actions = actions
        self._metrics = metrics
        self._reader = reader
        self._sink = sink
        self._replica = replica
        self._store_timeout_s = store_timeout_s
        self._withdrawn = False
        self._encoder = msgspec.json.Encoder()
        self._authorization = f"Bearer {token}".encode() if token else None
        self._rate = rate if rate is not None else RequestRate()
        self._scrape: tuple[float, _Response] | None = None
        """The last rendered /metrics and when (Trio's clock): served again for
        ``METRICS_TTL_S`` instead of reading and rendering once per request."""

    @property
    def ready(self) -> bool:
        return not self._withdrawn and self._lifecycle.ready

    def withdraw(self) -> None:
        """Answer 503 on ``/readyz`` from now on, whatever the lifecycle does."""
        self._withdrawn = True

    async def http(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if await self._rate.admit():
            response = await self._respond(scope)
        else:
            response = self._busy()
        await self._send(scope, send, response)

    async def _respond(self, scope: HTTPScope) -> _Response:
        path = scope["path"]
        route = _ROUTES.get(path)
        if route is None:
            return _Response(404, b"not found\n")
        if scope["method"] not in ("GET", "HEAD"):
            allow = ((b"allow", b"GET, HEAD"),)
            return _Response(405, b"method not allowed\n", extra_headers=allow)
        if _has_body(scope["headers"]):
            return _Response(413, b"request bodies are not accepted\n")
        if path in PROTECTED and not self._authorized(scope["headers"]):
            challenge = ((b"www-authenticate", b"Bearer"),)
            return _Response(401, b"unauthorized\n", extra_headers=challenge)
        return await route(self, scope)

    def _authorized(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        if self._authorization is None:
            return True
        given = [value for name, value in headers if name.lower() == b"authorization"]
        # One header, compared in constant time; several are refused (no guessing which).
        return len(given) == 1 and hmac.compare_digest(given[0].strip(), self._authorization)

    def _busy(self) -> _Response:
        self._metrics.count_error(HTTP_BUSY)
        retry = ((b"retry-after", b"1"),)
        return _Response(503, b'{"error":"busy"}', _JSON, extra_headers=retry)

    async def _healthz(self, scope: HTTPScope) -> _Response:
        return _Response(200, b"ok\n")

    async def _readyz(self, scope: HTTPScope) -> _Response:
        if self.ready:
            return _Response(200, b"ready\n")
        return _Response(503, b"not ready\n")

    async def _metrics_text(self, scope: HTTPScope) -> _Response:
        now = trio.current_time()
        if self._scrape is not None and now - self._scrape[0] < METRICS_TTL_S:
            return self._scrape[1]
        response = await self._metrics_fresh()
        self._scrape = (now, response)
        return response

    async def _metrics_fresh(self) -> _Response:
        # The scrape answers whatever its reads do: every other series is local, a gauge
        # whose read failed keeps its previous value and the failure is counted.
        backlog = await self._scrape_read(self._reader.due_backlog, BACKLOG_FAILED)
        if backlog is not None:
            self._metrics.set_due_backlog(backlog)
        if self._actions is not None:
            totals = await self._scrape_read(self._actions.action_totals, ACTIONS_FAILED)
            if totals is not None:
                self._metrics.set_action_totals(totals)
            failing = await self._scrape_read(self._actions.failing_counts, ACTIONS_FAILED)
            if failing is not None:
                self._metrics.set_failing(failing)
        return _Response(200, self._metrics.render(), METRICS_CONTENT_TYPE.encode())

    async def _scrape_read(self, read: Callable[[], Awaitable[T]], code: str) -> T | None:
        """One database read of a scrape, within the store timeout; None when it failed
        (no free connection: ``HTTP_BUSY``; else ``code``, counted and reported)."""
        try:
            with trio.fail_after(self._store_timeout_s):
                return await read()
        except TimeoutError:
            self._metrics.count_error(HTTP_BUSY)
        except Exception as exc:
            self._metrics.count_error(code)
            self._sink.emit(from_exception(code, exc, replica=self._replica))
        return None

    async def _schedules(self, scope: HTTPScope) -> _Response:
        limit = limit_of(scope["query_string"])
        if limit is None:
            return _Response(400, b"limit must be an integer 1..1000\n")
        after = cursor_of(scope["query_string"])
        if after is False:
            return _Response(400, b"cursor must be a next_cursor value (PROJECT/TRIGGER)\n")
        try:
            with trio.fail_after(self._store_timeout_s):
                if after is None:
                    rows = await self._reader.list_schedules(limit)
                else:
                    rows = await self._reader.list_schedules_after(after, limit)
        except TimeoutError:
            return self._busy()
        except Exception as exc:
            self._metrics.count_error(SCHEDULES_FAILED)
            self._sink.emit(from_exception(SCHEDULES_FAILED, exc, replica=self._replica))
            return _Response(503, b'{"error":"store_unavailable"}', _JSON)
        return _Response(200, self._encoder.encode(page_of(rows, limit)), _JSON)

    async def _send(self, scope: HTTPScope, send: ASGISendCallable, response: _Response) -> None:
        headers = [
            (b"content-type", response.content_type),
            (b"content-length", str(len(response.body)).encode()),
            (b"cache-control", b"no-store"),
            *response.extra_headers,
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        body = b"" if scope["method"] == "HEAD" else response.body
        await send({"type": "http.response.body", "body": body, "more_body": False})


_Route = Callable[[AdmissionApp, HTTPScope], Awaitable[_Response]]
_ROUTES: Final[dict[str, _Route]] = {
    "/healthz": AdmissionApp._healthz,
    "/readyz": AdmissionApp._readyz,
    "/metrics": AdmissionApp._metrics_text,
    "/v1/schedules": AdmissionApp._schedules,
}


def _has_body(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """A request that announces a body: any transfer-encoding, or a length other than 0."""
    for name, value in headers:
        name = name.lower()
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _parse_bind(bind: str) -> tuple[str, int]:
    """``http://127.0.0.1:8080`` or ``http://[::1]:8080`` -> (host, port)."""
    address = bind.partition("://")[2]
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def serve_http(
    app: AdmissionApp,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` until cancelled, within ``qlsched.http_limits``.

    Hypercorn's HTTP/1.1 protocol runs per connection on a stream whose sends are bounded,
    from our own accept loop: at most ``MAX_CONNECTIONS`` at once, ``KEEP_ALIVE_REQUESTS``
    requests each. Calls ``task_status.started((host, actual_port))`` once the listener is
    bound, so ``port=0`` works.

    Cancellation:
        Stopping is cancelling the caller's scope: the listener and every open connection
        close at once (a send hypercorn shields is woken by the close), so the stop deadline
        holds whatever clients do. Withdraw readiness first (``app.withdraw()``).

    Raises:
        OSError: when the address cannot be bound.
    """
    config = hypercorn.config.Config()
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_max_requests = KEEP_ALIVE_REQUESTS
    listeners = await trio.open_tcp_listeners(port, host=host)
    context = WorkerContext(None)
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")

    async def connection(stream: BoundedStream) -> None:
        state = ConnectionState({})
        await TCPServer(wrapped, config, context, state, stream)  # type: ignore[arg-type]

    sockname = listeners[0].socket.getsockname()
    task_status.started((str(sockname[0]), int(sockname[1])))
    await serve_bounded(connection, listeners)
