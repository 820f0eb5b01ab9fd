"""The stop deadline for an embedding Trio service (issue 21): ``request_stop()`` and the
cancellation of the embedder's own scope, with the round's admit blocked on a lock.

The control runs in this process (``qlsched.serve``) through ``tests.support.pgproxy``
with ``sslmode=prefer``; the runtime role waits up to 5.5 s for a lock, longer than the stop
deadline, so only the deadline (or the cancellation) can end the blocked admit.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import pytest
import trio

from qlsched.cluster.root import ClusterControl, serve
from qlsched.core.config import Config
from qlsched.embedded import EmbeddedPostgres, open_embedded
from tests.faults.stop_support import (
    CADENCE_MS,
    LEASE_MS,
    TIMEOUTS,
    Gate,
    assert_exactly_once,
    bound_s,
    frozen,
    open_gate,
    table_locks,
    wait_lock_waiter,
    wait_runs,
)
from tests.support.faults import report
from tests.support.memory_sink import MemorySink

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


def config(gate: Gate, owner: str, stop_timeout_ms: int) -> Config:
    return Config(
        dsn=gate.proxy.dsn(gate.db.name, ssl=True),
        owner=owner,
        lease_ms=LEASE_MS,
        cadence_ms=CADENCE_MS,
        stop_timeout_ms=stop_timeout_ms,
        idle_in_transaction_timeout_ms=TIMEOUTS.idle_in_transaction_ms,
    )


async def test_request_stop_from_an_embedding_service_meets_the_deadline(
    server: EmbeddedPostgres,
) -> None:
    """Rule: ``control.request_stop()`` while the admit waits for a lock on ``runs``:
    ``serve`` returns within stop_timeout_ms + 1 s without raising, reports the round cut
    at the deadline, and the window is exactly once."""
    stop_timeout_ms = 1000
    sink = MemorySink(replica="e1")
    async with open_gate(server, "embed_stop") as gate:
        returned = trio.Event()

        async def service(*, task_status: trio.TaskStatus[ClusterControl]) -> None:
            await serve(config(gate, "e1", stop_timeout_ms), sink=sink, task_status=task_status)
            returned.set()

        async with trio.open_nursery() as nursery:
            control: ClusterControl = await nursery.start(service)
            await wait_runs(gate.su, 1)
            async with table_locks(gate.db.superuser_dsn, ["runs"]):
                await wait_lock_waiter(gate.su, "qlsched-admit")
                started = trio.current_time()
                control.request_stop()
                with trio.fail_after(bound_s(stop_timeout_ms) + 10):
                    await returned.wait()
                seconds = trio.current_time() - started
        assert seconds <= bound_s(stop_timeout_ms)
        assert control.statistics().lifecycle.cut_at_deadline
        assert control.trace[-2:] == ["lifecycle_stopped", "pools_closing"]
        summary = await assert_exactly_once(gate, {"e1"})
    report(f"request_stop with the admit blocked: serve returned in {seconds:.2f} s; {summary}")


@pytest.mark.parametrize("blocked", ["lock", "frozen"])
async def test_cancelling_the_embedders_scope_cuts_at_once(
    server: EmbeddedPostgres, blocked: str
) -> None:
    """Rule: cancelling the scope around an embedded control cuts it at once: no drain (its
    5 s stop deadline is not waited for) and no graceful pool close (which would wait for a
    frozen server); the scope exits within half a second with the admit blocked on a lock
    or the whole server SIGSTOPped, and the window is exactly once."""
    stop_timeout_ms = 5000
    async with open_gate(server, f"embed_cancel_{blocked}") as gate:
        with trio.CancelScope() as outer:
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(serve, config(gate, "e2", stop_timeout_ms)))
                await wait_runs(gate.su, 1)
                async with contextlib.AsyncExitStack() as stack:
                    if blocked == "lock":
                        await stack.enter_async_context(
                            table_locks(gate.db.superuser_dsn, ["runs"])
                        )
                        await wait_lock_waiter(gate.su, "qlsched-admit")
                    else:
                        stack.enter_context(frozen(server))
                        await trio.sleep(1.0)
                    started = trio.current_time()
                    outer.cancel()
                    await trio.sleep_forever()
        seconds = trio.current_time() - started
        assert outer.cancelled_caught
        assert seconds < 0.5
        summary = await assert_exactly_once(gate, {"e2"})
    report(f"embedder's scope cancelled ({blocked}): out in {seconds:.2f} s; {summary}")
