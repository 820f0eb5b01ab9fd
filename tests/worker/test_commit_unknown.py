"""A lost COMMIT reply on a finish (docs/contract.md §13): the worker reaches the server
through the tests' TCP proxy, which forwards the finish statement, lets it commit, drops the
reply and resets the client. The finish is ``commit_unknown``, never re-sent, and the Run
has exactly one terminal state: a reaper after the lease's expiry changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from qlsched.core.work import FinishUnknown, JobResult
from qlsched.postgres import worker
from qlsched.postgres.pool import open_database
from tests.integration.adapter_support import Env, open_env
from tests.support.pg import PgCluster, TestDatabase
from tests.support.pgproxy import AdmitContext, PgProxy, unix_socket_path
from tests.worker.support import admitted, attempts, claim, events, expire, run_row, worker_db

FINISH_MARKER = b"Finish Attempt $1 held under token"


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened


async def test_lost_finish_reply_is_commit_unknown_and_never_a_second_end(
    env: Env, pg_cluster: PgCluster
) -> None:
    """Rule: the finish's COMMIT landed but its reply was lost: the worker gets
    commit_unknown (not an error, not a re-send); the Run is succeeded once, with one
    terminal event, and reaping after the lease would have expired finds nothing to mark."""
    server = pg_cluster.embedded
    if server is None:
        pytest.skip("needs the embedded server's Unix socket (QLSCHED_TEST_DSN is set)")
    finishes: list[int] = []

    async def lose(ctx: AdmitContext) -> None:
        finishes.append(ctx.number)
        ctx.lose_reply = True

    await admitted(env)
    proxy = PgProxy(
        unix_socket_path(server.socket_dir, server.port), on_admit=lose, marker=FINISH_MARKER
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        async with worker_db(env) as db:
            [c] = await claim(db, lease_ms=60_000)
        async with open_database(
            proxy.dsn(env.db.name, user="qlsched_worker"), max_size=1
        ) as through:
            out = await worker.finish(
                through,
                attempt_id=c.attempt_id,
                lease_token=c.lease_token,
                result=JobResult(end="succeeded", code="succeeded", exit_code=0),
            )
        nursery.cancel_scope.cancel()
    assert isinstance(out, FinishUnknown)
    assert finishes == [1]  # sent once, never again
    assert len(proxy.lost) == 1
    assert not proxy.lost[0].error_reply
    await expire(env, c.attempt_id)
    async with worker_db(env) as db:
        assert await worker.reap(db, limit=10, actor="w2") == []
    assert (await run_row(env, c.run_id))["state"] == "succeeded"
    [a] = await attempts(env, c.run_id)
    assert a["state"] == "succeeded"
    ends = [e for e in await events(env, c.run_id) if e in ("run.succeeded", "run.failed")]
    assert ends == ["run.succeeded"]


async def test_finish_that_never_landed_becomes_lost_and_retried(
    env: Env, pg_cluster: PgCluster
) -> None:
    """Rule: when the finish did not land (the connection was cut before the server got
    it), the Attempt is still running; after its lease it is marked lost and the Run
    follows the retry policy (here: failed, max_attempts 1). Still one terminal state."""
    server = pg_cluster.embedded
    if server is None:
        pytest.skip("needs the embedded server's Unix socket (QLSCHED_TEST_DSN is set)")

    async def abort(ctx: AdmitContext) -> None:
        ctx.abort = True

    await admitted(env)
    proxy = PgProxy(
        unix_socket_path(server.socket_dir, server.port), on_admit=abort, marker=FINISH_MARKER
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        async with worker_db(env) as db:
            [c] = await claim(db, lease_ms=60_000)
        async with open_database(
            proxy.dsn(env.db.name, user="qlsched_worker"), max_size=1
        ) as through:
            out = await worker.finish(
                through,
                attempt_id=c.attempt_id,
                lease_token=c.lease_token,
                result=JobResult(end="succeeded", code="succeeded", exit_code=0),
            )
        nursery.cancel_scope.cancel()
    assert isinstance(out, FinishUnknown)
    assert (await run_row(env, c.run_id))["state"] == "running"
    await expire(env, c.attempt_id)
    async with worker_db(env) as db:
        [reaped] = await worker.reap(db, limit=10, actor="w2")
    assert reaped.run_state == "failed"
    ends = [e for e in await events(env, c.run_id) if e in ("run.succeeded", "run.failed")]
    assert ends == ["run.failed"]
