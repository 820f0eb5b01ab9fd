"""HTTP admission and metrics over a real socket (127.0.0.1, port 0) and Trio's real clock.

The client is a minimal HTTP/1.1 exchange over ``trio.open_tcp_stream`` (``Connection:
close``, read to EOF), so no HTTP client dependency is needed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from qlsched.cluster.http import AdmissionApp, SchedulesResponse, serve_http
from qlsched.cluster.metrics import Metrics
from qlsched.core.store import ScheduleView
from tests.conformance.memory_harness import wall_clock_ms
from tests.lifecycle.conftest import Replica, make_replica, on
from tests.support.memory_store import Hook, MemoryStore

SECRET = "password=hunter2"


class Response(msgspec.Struct, frozen=True):
    status: int
    headers: dict[str, str]
    body: bytes


async def request(port: int, path: str, method: str = "GET") -> Response:
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(
                f"{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode()
            )
            data = bytearray()
            while chunk := await stream.receive_some():
                data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Response(int(status_line.split(" ")[1]), headers, body)


def replica(hook: Hook | None = None) -> Replica:
    return make_replica(MemoryStore(wall_clock_ms, hook=hook))


def app_of(r: Replica) -> AdmissionApp:
    return AdmissionApp(
        lifecycle=r.lifecycle, metrics=r.metrics, reader=r.store, sink=r.sink, replica="r1"
    )


@asynccontextmanager
async def serving(app: AdmissionApp) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(serve_http, app, "127.0.0.1", 0)
        assert host == "127.0.0.1"
        assert port > 0
        yield port
        nursery.cancel_scope.cancel()


async def test_endpoints() -> None:
    """/healthz answers 200, /readyz 200 while scheduling, /metrics the Prometheus text,
    /v1/schedules the schedule rows as JSON; unknown paths 404, other methods 405, HEAD
    has no body."""
    r = replica()
    r.store.add_trigger("p", "b", "* * * * *")
    r.store.add_trigger("p", "a", "*/5 * * * *", timezone="Asia/Shanghai")
    app = app_of(r)

    async with trio.open_nursery() as nursery, serving(app) as port:
        await nursery.start(r.lifecycle.run)
        await r.lifecycle.wait_rounds(1)

        health = await request(port, "/healthz")
        assert (health.status, health.body) == (200, b"ok\n")
        assert (await request(port, "/readyz")).status == 200

        metrics = await request(port, "/metrics")
        assert metrics.status == 200
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(metrics.body.decode())}
        assert {
            "qlsched_claims",
            "qlsched_admits",
            "qlsched_outcomes",
            "qlsched_skipped_occurrences",
            "qlsched_coalesced_occurrences",
            "qlsched_races_lost",
            "qlsched_fence_lost",
            "qlsched_errors",
            "qlsched_round_duration_seconds",
            "qlsched_schedule_lag_seconds",
            "qlsched_due_backlog",
        } <= set(families)
        [claims] = [s for s in families["qlsched_claims"].samples if s.name.endswith("_total")]
        assert claims.value == 2
        [backlog] = families["qlsched_due_backlog"].samples
        assert backlog.value == await r.store.due_backlog() == 0

        schedules = await request(port, "/v1/schedules")
        assert (schedules.status, schedules.headers["content-type"]) == (200, "application/json")
        rows = msgspec.json.decode(schedules.body, type=SchedulesResponse).schedules
        assert [(v.trigger_id, v.timezone, v.active) for v in rows] == [
            ("a", "Asia/Shanghai", True),
            ("b", "UTC", True),
        ]
        assert all(v.next_fire_at_ms is not None for v in rows)
        limited = await request(port, "/v1/schedules?limit=1")
        assert len(msgspec.json.decode(limited.body, type=SchedulesResponse).schedules) == 1
        assert (await request(port, "/v1/schedules?limit=0")).status == 400
        assert (await request(port, "/v1/schedules?limit=x")).status == 400

        assert (await request(port, "/nope")).status == 404
        post = await request(port, "/healthz", method="POST")
        assert (post.status, post.headers["allow"]) == (405, "GET, HEAD")
        head = await request(port, "/healthz", method="HEAD")
        assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "3")

        r.lifecycle.stop()


async def test_readyz_is_503_before_start_while_stopping_and_when_withdrawn() -> None:
    """/readyz is 503 until the lifecycle runs, 200 while it schedules, 503 from the moment
    it is stopping (draining) and after; ``withdraw()`` makes it 503 whatever the lifecycle
    does."""
    in_admit = trio.Event()
    may_finish = trio.Event()

    async def gate(_: str) -> None:
        in_admit.set()
        await may_finish.wait()

    r = replica(on("admit", gate))
    r.store.add_trigger("p", "t", "* * * * *")
    r.store.set_cursor("p", "t", wall_clock_ms() - 1_000)
    app = app_of(r)

    async with trio.open_nursery() as nursery, serving(app) as port:
        assert (await request(port, "/readyz")).status == 503
        await nursery.start(r.lifecycle.run)
        await in_admit.wait()
        assert (await request(port, "/readyz")).status == 200

        r.lifecycle.stop()
        assert r.lifecycle.statistics().running
        draining = await request(port, "/readyz")
        assert (draining.status, draining.body) == (503, b"not ready\n")
        assert (await request(port, "/healthz")).status == 200

        may_finish.set()
        await r.lifecycle.wait_stopped()
        assert (await request(port, "/readyz")).status == 503

    r2 = replica()
    app2 = app_of(r2)
    async with trio.open_nursery() as nursery, serving(app2) as port:
        await nursery.start(r2.lifecycle.run)
        assert (await request(port, "/readyz")).status == 200
        app2.withdraw()
        assert (await request(port, "/readyz")).status == 503
        r2.lifecycle.stop()


class BrokenReader:
    """A reader whose database is gone: raises with a message that must not leak."""

    async def due_backlog(self) -> int:
        raise ConnectionError(SECRET)

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        raise ConnectionError(SECRET)


async def test_store_failures_behind_endpoints() -> None:
    """When the store cannot be read, /metrics still answers (the backlog gauge keeps its
    value, the failure is counted) and /v1/schedules answers 503; both are reported by code
    and class only, and no response carries the exception's message."""
    r = replica()
    app = AdmissionApp(lifecycle=r.lifecycle, metrics=r.metrics, reader=BrokenReader(), sink=r.sink)

    async with serving(app) as port:
        metrics = await request(port, "/metrics")
        schedules = await request(port, "/v1/schedules")

    assert metrics.status == 200
    text = metrics.body.decode()
    errors = {
        s.labels.get("code"): s.value
        for f in text_string_to_metric_families(text)
        if f.name == "qlsched_errors"
        for s in f.samples
        if s.name.endswith("_total")
    }
    assert errors == {"backlog_failed": 1}
    assert (schedules.status, schedules.body) == (503, b'{"error":"store_unavailable"}')
    assert [(d.code, d.exception) for d in r.sink.items] == [
        ("backlog_failed", "ConnectionError"),
        ("schedules_failed", "ConnectionError"),
    ]
    assert b"hunter2" not in metrics.body + schedules.body
    assert b"hunter2" not in msgspec.json.encode(r.sink.items)


async def test_serve_http_stops_on_cancel() -> None:
    """Cancelling serve_http's scope closes the listener: new connections are refused."""
    r = replica()
    async with serving(app_of(r)) as port:
        assert (await request(port, "/healthz")).status == 200

    with pytest.raises(OSError, match="all attempts to connect"):
        await trio.open_tcp_stream("127.0.0.1", port)


def test_metrics_instances_do_not_share_series() -> None:
    """Each Metrics owns its registry: two replicas in one process count separately and
    nothing is registered globally."""
    a, b = Metrics(), Metrics()
    a.claims.inc(3)
    a.set_due_backlog(7)

    def value(m: Metrics, name: str) -> float:
        for family in text_string_to_metric_families(m.render().decode()):
            for s in family.samples:
                if s.name == name:
                    return s.value
        raise AssertionError(name)

    assert (value(a, "qlsched_claims_total"), value(b, "qlsched_claims_total")) == (3, 0)
    assert (value(a, "qlsched_due_backlog"), value(b, "qlsched_due_backlog")) == (7, 0)
    assert value(b, "qlsched_fence_lost_total") == 0  # series exist from the start
