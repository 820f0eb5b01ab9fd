"""The composition root's edges with the embedder: an error raised in the embedder's own
code reaches it as itself, by design of the root (not of the pools below it); and the
replica's sessions carry the config's ``idle_in_transaction_timeout_ms``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import pytest
import trio
import trio_asyncio

import qlsched
from qlsched.cluster import root
from qlsched.cluster.root import ClusterControl, open_cluster_control
from qlsched.exception_groups import single_leaf_unwrapped
from qlsched.postgres.pool import Connection, Database, open_database
from tests.integration.cluster_support import control_config, publish_triggers, trigger
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

STOPPED = ["lifecycle_stopped", "pools_closing"]


def _embedders_loop(own: bool) -> AbstractAsyncContextManager[Any]:
    """The embedder's own trio-asyncio loop, or none (the pools then open theirs)."""
    return trio_asyncio.open_loop() if own else nullcontext()


@pytest.mark.parametrize("own_loop", [False, True], ids=["pool_loop", "embedders_loop"])
async def test_an_error_in_the_block_reaches_the_embedder_as_itself(
    pg_db: TestDatabase, own_loop: bool
) -> None:
    """Rule: ``except KeyError`` around ``async with open_cluster_control(...)`` catches the
    very KeyError the block raised (not an ExceptionGroup), after the replica stopped in
    order; also when the embedder runs its own trio-asyncio loop, so the pools open none
    and unwrap nothing."""
    await publish_triggers(pg_db, [trigger("t")])
    config = control_config(pg_db.runtime_dsn, "r")
    mine = KeyError("the embedder's")
    control: ClusterControl | None = None
    caught: BaseException | None = None
    async with _embedders_loop(own_loop):
        try:
            async with open_cluster_control(config, sink=MemorySink()) as control:
                await control.lifecycle.wait_rounds(1)
                raise mine
        except KeyError as exc:
            caught = exc
    assert caught is mine
    assert control is not None
    assert control.trace[-2:] == STOPPED
    assert control.lifecycle.statistics().stopped


async def test_serve_adds_nothing_to_the_embedders_error(pg_db: TestDatabase) -> None:
    """Rule: with ``serve`` started by ``nursery.start``, a KeyError the embedder's code
    raises in that nursery cuts the replica and is the nursery's only error (serve adds no
    Cancelled group or pool error of its own), so ``except KeyError`` around the nursery,
    with its one leaf unwrapped, catches that KeyError."""
    await publish_triggers(pg_db, [trigger("t")])
    config = control_config(pg_db.runtime_dsn, "r")
    mine = KeyError("the embedder's")
    control: ClusterControl | None = None
    caught: BaseException | None = None
    try:
        with single_leaf_unwrapped():
            async with trio.open_nursery() as nursery:
                control = await nursery.start(qlsched.serve, config)
                await control.lifecycle.wait_rounds(1)
                raise mine
    except KeyError as exc:
        caught = exc
    assert caught is mine
    assert control is not None
    assert control.trace[-2:] == STOPPED


async def test_the_replicas_sessions_take_the_idle_in_transaction_timeout(
    pg_db: TestDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: every session of the replica's claim and admit pools runs with
    ``idle_in_transaction_session_timeout`` = the config's
    ``idle_in_transaction_timeout_ms`` (the runtime role's own setting, 5 s here, is not
    what they use)."""
    opened: list[Database] = []

    @asynccontextmanager
    async def recording(dsn: str, **kwargs: Any) -> AsyncIterator[Database]:
        async with open_database(dsn, **kwargs) as db:
            opened.append(db)
            yield db

    async def setting(conn: Connection) -> str:
        return str(await conn.fetchval("SHOW idle_in_transaction_session_timeout"))

    monkeypatch.setattr(root, "open_database", recording)
    config = control_config(pg_db.runtime_dsn, "r", idle_in_transaction_timeout_ms=1234)
    async with open_cluster_control(config, sink=MemorySink()):
        assert len(opened) == 2
        assert [await db.run(setting) for db in opened] == ["1234ms", "1234ms"]
