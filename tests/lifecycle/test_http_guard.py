"""HTTP admission's guards (issue 15, item 4), over a real socket: request bodies are
refused unread, an optional bearer token protects ``/metrics`` and ``/v1/schedules`` while
the probes stay open, and a reader with no free connection (``TimeoutError`` from the
pool's acquire) gives a quick 503 on ``/v1/schedules`` without a diagnostic per request.
"""

from __future__ import annotations

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from qlsched.cluster.http import AdmissionApp
from qlsched.core.store import ScheduleView
from tests.lifecycle.test_http import Response, replica, serving

TOKEN = "s3cret-token"


async def raw(port: int, head: str, body: bytes = b"") -> Response:
    """Send ``head`` (request line and headers, CRLF-separated, no final blank line) and
    ``body``; read the response to EOF."""
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(f"{head}\r\nConnection: close\r\n\r\n".encode() + body)
            data = bytearray()
            while chunk := await stream.receive_some():
                data += chunk
    head_bytes, _, rest = bytes(data).partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (x.partition(":") for x in lines)}
    return Response(int(status_line.split(" ")[1]), headers, rest)


def guarded_app(token: str | None = TOKEN) -> AdmissionApp:
    r = replica()
    r.store.add_trigger("p", "t", "* * * * *")
    return AdmissionApp(
        lifecycle=r.lifecycle, metrics=r.metrics, reader=r.store, sink=r.sink, token=token
    )


@pytest.mark.parametrize(
    ("head", "body"),
    [
        ("GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 5", b"hello"),
        ("GET /v1/schedules HTTP/1.1\r\nHost: t\r\nContent-Length: 5", b"hello"),
        (
            "GET /metrics HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked",
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
    ],
    ids=["content-length", "content-length-protected", "chunked"],
)
async def test_request_bodies_are_refused(head: str, body: bytes) -> None:
    """Rule: a request that carries a body (a non-zero Content-Length or any
    Transfer-Encoding) is answered 413, whatever the path, before authentication."""
    async with serving(guarded_app()) as port:
        response = await raw(port, head, body)
        assert response.status == 413
        empty = await raw(port, "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0")
        assert empty.status == 200


async def test_the_token_protects_metrics_and_schedules_but_not_the_probes() -> None:
    """Rule: with a token, /metrics and /v1/schedules answer 401 (with a Bearer challenge)
    without `Authorization: Bearer TOKEN`, with a wrong token, another scheme or two
    Authorization headers, and 200 with it; /healthz and /readyz need nothing."""
    async with serving(guarded_app()) as port:
        for path in ("/metrics", "/v1/schedules"):
            base = f"GET {path} HTTP/1.1\r\nHost: t"
            for extra in (
                "",
                "\r\nAuthorization: Bearer wrong",
                f"\r\nAuthorization: Basic {TOKEN}",
                f"\r\nAuthorization: Bearer {TOKEN}x",
                f"\r\nAuthorization: Bearer {TOKEN}\r\nAuthorization: Bearer {TOKEN}",
            ):
                refused = await raw(port, base + extra)
                assert refused.status == 401, (path, extra)
                assert refused.headers["www-authenticate"] == "Bearer"
                assert TOKEN.encode() not in refused.body
            ok = await raw(port, f"{base}\r\nAuthorization: Bearer {TOKEN}")
            assert ok.status == 200, path
        for path in ("/healthz", "/readyz"):
            assert (await raw(port, f"GET {path} HTTP/1.1\r\nHost: t")).status in (200, 503)
            assert (await raw(port, f"GET {path} HTTP/1.1\r\nHost: t")).status != 401


async def test_without_a_token_everything_is_open() -> None:
    """Rule: with no token configured, /metrics and /v1/schedules need no Authorization."""
    async with serving(guarded_app(token=None)) as port:
        for path in ("/metrics", "/v1/schedules"):
            assert (await raw(port, f"GET {path} HTTP/1.1\r\nHost: t")).status == 200


class BusyReader:
    """A reader whose pool has no free connection: the acquire timed out."""

    async def due_backlog(self) -> int:
        raise TimeoutError

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        raise TimeoutError


async def test_a_busy_reader_is_a_quick_503_counted_not_logged() -> None:
    """Rule: when the HTTP pool has no free connection, /v1/schedules answers 503 with
    Retry-After and /metrics still answers 200 (its local series); each is counted as
    `http_busy`, and nothing goes to the diagnostic sink (a flood would flood it)."""
    r = replica()
    app = AdmissionApp(lifecycle=r.lifecycle, metrics=r.metrics, reader=BusyReader(), sink=r.sink)
    async with serving(app) as port:
        schedules = await raw(port, "GET /v1/schedules HTTP/1.1\r\nHost: t")
        metrics = await raw(port, "GET /metrics HTTP/1.1\r\nHost: t")
    assert (schedules.status, schedules.body) == (503, b'{"error":"busy"}')
    assert schedules.headers["retry-after"] == "1"
    assert metrics.status == 200
    errors = {
        s.labels.get("code"): s.value
        for f in text_string_to_metric_families(metrics.body.decode())
        if f.name == "qlsched_errors"
        for s in f.samples
        if s.name.endswith("_total")
    }
    assert errors == {"http_busy": 2}
    assert r.sink.items == []
