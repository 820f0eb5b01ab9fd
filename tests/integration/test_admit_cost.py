"""An admit's work grows with its rows, never with their square.

The class: a join the cached generic plan runs as a nested loop over two CTEs it expects
one row from each. The cron admit and the request admit joined their inserted Runs back to
their input rows that way to find each Run's Attempt id and event order: 128 x 128 row
pairs per 128-row batch, twice, a quarter of the statement's time, and four times as many
at the catch-up budget of 256. Each statement here runs as its pool prepares it (a generic
plan, the pool's settings) under ``EXPLAIN ANALYZE`` in a transaction rolled back; every
plan node's rows, counted over its loops with the rows its filters removed, stay within
a few per admitted row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.core.config import Config
from qlsched.postgres.admit_rows import admit_args
from qlsched.postgres.queries import query
from qlsched.postgres.requests import PostgresRequestStore, record_backfill, request_admit_args
from qlsched.postgres.store import ADMIT_SETTINGS
from tests.integration.adapter_support import (
    MINUTE_MS,
    Env,
    admit_due_at_cursors,
    fire_for,
    one_project,
    run_round,
)
from tests.support.memory_sink import MemorySink
from tests.support.plans import analyzed, heaviest, nodes

BATCH = 256
"""The catch-up budget: the largest batch a replica sends."""
PER_ROW_MAX = 4
"""Rows one plan node may handle per admitted row (two events per Run is the most a
linear plan needs); a nested loop over the batch twice handles BATCH per row."""


async def _analyzed(env: Env, sql: str, args: Sequence[Any]) -> dict[str, Any]:
    """The plan of ``sql`` with ``args`` as the admit pool runs it (a prepared statement
    with a generic plan, the pool's settings, SERIALIZABLE, the runtime role), executed and
    rolled back."""
    plan, _ = await analyzed(
        env,
        sql,
        args,
        role="qlsched_runtime",
        settings=ADMIT_SETTINGS,
        begin="BEGIN ISOLATION LEVEL SERIALIZABLE",
        marks=("Insert on runs", '"Relation Name": "runs"'),
    )
    return plan


def _inserted(plan: dict[str, Any], table: str) -> float:
    return sum(
        n.get("Actual Rows", 0)
        for n in nodes(plan)
        if n.get("Operation") == "Insert" and n.get("Relation Name") == table
    )


async def test_a_batch_admits_work_is_linear_in_its_rows(env: Env) -> None:
    """Rule: one admit of BATCH Fires handles at most PER_ROW_MAX rows per Fire in any plan
    node (it handled BATCH per Fire with the join back to ``admitted``)."""
    await env.publish(one_project(BATCH))
    await env.make_due(age_ms=60_000)
    claims = await env.store.claim("r1", BATCH, 30_000)
    assert len(claims) == BATCH
    fires = [fire_for(c, now_ms=c.cursor_ms) for c in claims]
    plan = await _analyzed(env, query("admit"), ["r1", *admit_args(fires)])
    assert _inserted(plan, "runs") == BATCH  # the whole batch was admitted, not refused
    work, node = heaviest(plan)
    assert work <= PER_ROW_MAX * BATCH, (work, node)


async def test_a_backfill_chunks_work_is_linear_in_its_occurrences(env: Env) -> None:
    """Rule: one request admit of a BATCH-occurrence backfill chunk handles at most
    PER_ROW_MAX rows per occurrence in any plan node (BATCH with the join back to ``occ``
    and ``decided``)."""
    await env.publish(one_project(ids=["t0000"], cron="* * * * *"))
    await run_round(env.store, "cron", 16, 30_000)  # cron initialises its cursor
    start = (await env.now_ms() // MINUTE_MS - BATCH - 10) * MINUTE_MS

    async def record(conn: Any) -> object:
        return await record_backfill(
            conn,
            "p",
            "t0000",
            from_ms=start,
            to_ms=start + (BATCH - 1) * MINUTE_MS,
            max_occurrences=BATCH,
        )

    await env.admin(record)
    claim_db, admit_db = await env.open_pools()
    store = PostgresRequestStore(claim_db, admit_db)
    [claim] = (await store.claim("r1", 16, 30_000)).claims
    maker = RequestsPass(
        store, Config(owner="r1"), MemorySink(), Metrics(), budget=BATCH, poll_s=0.0
    )
    chunk = maker.chunk_for(claim)
    assert chunk is not None
    assert len(chunk.occurrences) == BATCH
    plan = await _analyzed(env, query("request_admit"), request_admit_args(chunk))
    assert _inserted(plan, "runs") == BATCH
    work, node = heaviest(plan)
    assert work <= PER_ROW_MAX * BATCH, (work, node)


CANCEL_HISTORY = 20
"""Admits of each cancel_other trigger before the one measured: its Run history, and the
Attempts' partial index, both many times the batch."""


async def test_a_cancel_other_admits_work_is_linear_in_its_rows_not_the_history(
    env: Env,
) -> None:
    """Rule: with every trigger ``cancel_other`` and CANCEL_HISTORY of its Runs behind it,
    one admit of BATCH Fires (each cancelling its trigger's queued Run and that Run's
    Attempt) handles at most PER_ROW_MAX rows per Fire in any plan node, on tables never
    analysed (a new cluster). The generic plan read each trigger's whole Run history and,
    per cancelled Run, all of ``attempts_live_idx``."""
    await env.publish(one_project(BATCH, overlap="cancel_other"))
    for i in range(CANCEL_HISTORY + 1):
        await admit_due_at_cursors(env, BATCH, age_ms=(CANCEL_HISTORY + 3 - i) * 60_000)
    await env.make_due(age_ms=60_000)
    claims = await env.store.claim("r1", BATCH, 30_000)
    assert len(claims) == BATCH
    fires = [fire_for(c, now_ms=c.cursor_ms) for c in claims]
    plan = await _analyzed(env, query("admit"), ["r1", *admit_args(fires)])
    assert _inserted(plan, "runs") == BATCH
    work, node = heaviest(plan)
    assert work <= PER_ROW_MAX * BATCH, (work, node)
