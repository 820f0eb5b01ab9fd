"""HTTP limits (docs/operations.md "HTTP limits"), on the Edge responder over loopback with a
real load generator (bounded: 200 clients, 2 s): at most ``MAX_CONNECTIONS`` connections are
served at once (the next waits in the kernel's accept queue), at most ``BURST`` +
``REQUESTS_PER_S`` a second are answered (the rest 503 ``busy``), whatever the endpoint; a
``/metrics`` flood reads the file once a second at most. The cluster's hypercorn server
shares the same limits (``qlsched.http_limits``); its stop with a never-reading client is
``tests/faults/test_http_stop.py``."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from qlsched.edge.http import open_http_listeners, serve_http
from qlsched.edge.scheduler import EdgeScheduler
from qlsched.edge.settings import EdgeSettings
from qlsched.http_limits import BURST, MAX_CONNECTIONS, REQUESTS_PER_S
from qlsched.metrics import Metrics
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import clocked_edge
from tests.support.memory_sink import MemorySink

CLIENTS = 200
FLOOD_S = 2.0


@pytest.fixture
async def address(tmp_path: Path) -> AsyncIterator[tuple[str, int]]:
    """An Edge HTTP responder on 127.0.0.1 (an empty file's scheduler), until the test ends."""
    async with clocked_edge(tmp_path, 1_800_000_000_000) as (db, _):
        metrics = Metrics(profile="edge")
        scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink(), metrics)
        listeners = await open_http_listeners("127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_http, scheduler, metrics, listeners)
            yield listeners[0].socket.getsockname()[:2]
            nursery.cancel_scope.cancel()


async def _get(address: tuple[str, int], path: str) -> int:
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    return int(data.split(maxsplit=2)[1])


@pytest.mark.parametrize("path", ["/healthz", "/metrics"])
async def test_a_flood_is_answered_at_the_rate_and_the_rest_is_busy(
    address: tuple[str, int], path: str
) -> None:
    """Rule: 200 clients requesting without pause for 2 s get at most BURST +
    REQUESTS_PER_S x the elapsed time answers 200; the others wait their turn (the
    connection cap holds them) or get 503, never an error or a hang, on an open and on a
    read-backed endpoint."""
    statuses: Counter[int] = Counter()
    started = trio.current_time()

    async def client() -> None:
        while trio.current_time() - started < FLOOD_S:
            statuses[await _get(address, path)] += 1

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for _ in range(CLIENTS):
                nursery.start_soon(client)
    elapsed = trio.current_time() - started
    assert set(statuses) <= {200, 503}, statuses
    assert statuses[200] <= BURST + REQUESTS_PER_S * elapsed + 1, (statuses, elapsed)


async def test_connections_beyond_the_cap_wait_to_be_accepted(address: tuple[str, int]) -> None:
    """Rule: with MAX_CONNECTIONS connections open and silent, one more is not served
    (not accepted: its request gets no answer) until one of them closes; then it is."""
    held = [await trio.open_tcp_stream(*address) for _ in range(MAX_CONNECTIONS)]
    extra = await trio.open_tcp_stream(*address)
    try:
        await extra.send_all(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
        with trio.move_on_after(0.5) as waited:
            await extra.receive_some(100)
        assert waited.cancelled_caught, "served beyond the connection cap"
        await held.pop().aclose()
        with trio.fail_after(10):
            answer = await extra.receive_some(100)
        assert answer.startswith(b"HTTP/1.0 200")
    finally:
        for stream in [*held, extra]:
            await stream.aclose()
