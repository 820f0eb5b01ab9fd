"""A worker's claim reads the Runs it may take, never a backlog or a history.

The class: cost that grows with a backlog or with history. A worker that takes only some
tasks (an embedded worker's handlers) walked ``runs_claimable_idx`` from the oldest queued
Run and dropped every Run of the other tasks, so a backlog of a task nobody works made each
of its claims read all of it. And with statistics of a real history (finished Runs, each
with its Attempt), the planner turned the "latest Attempt is pristine" test into a hash
join over every Attempt ever made: a sequential scan of ``attempts`` at every claim. Each
claim here runs as the worker's pool runs it (the worker role; a custom plan, and the
generic plan a long-lived prepared statement may switch to) under ``EXPLAIN ANALYZE`` in a
transaction rolled back, beside a backlog of another task's older queued Runs and a
finished history, analysed; every plan node's rows, counted over its loops with the rows
its filters removed, stay within a few per claimed Run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres import worker
from qlsched.postgres.queries import query
from tests.integration.adapter_support import Env, open_env, trigger
from tests.support.pg import TestDatabase
from tests.support.plans import analyzed, heaviest
from tests.worker.support import run_row, synthetic_runs, worker_db

BACKLOG = 2_000
"""Older queued Runs of a task the claiming worker does not take."""
HISTORY = 100_000
"""Finished Runs of task a, each with its Attempt and two events."""
LIMIT = 16
PER_CLAIMED_MAX = 8
"""Rows one plan node may handle per Run a claim may take (a Run, its Attempts, its
events); the filtered walk handled the whole backlog."""


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        tasks = [TaskEntry(project="p", id=t, command="true") for t in ("a", "b", "c")]
        await opened.publish(
            PublishFile(
                projects=[ProjectEntry(id="p")],
                tasks=tasks,
                triggers=[trigger("p", f"t{t.id}", task=t.id) for t in tasks],
            )
        )
        yield opened


async def _queue(env: Env, task: str, n: int, age_ms: int) -> None:
    await synthetic_runs(env, n, age_ms=age_ms, finished=False, task=task)


async def _analyzed(
    env: Env, name: str, args: Sequence[Any], *, generic: bool = False
) -> tuple[dict[str, Any], int]:
    """The plan of statement ``name`` as the worker's pool runs it (the worker role, the
    server's plan settings; ``generic``: the generic plan), on fresh statistics, executed
    and rolled back, and the Runs it took."""
    return await analyzed(
        env,
        query(name),
        args,
        role="qlsched_worker",
        settings={"plan_cache_mode": "force_generic_plan"} if generic else {},
        begin="BEGIN",
        marks=("worker_payloads",),
        analyze="qlsched.runs, qlsched.attempts, qlsched.run_events",
    )


@pytest.mark.parametrize("plan_kind", ["custom", "generic"])
@pytest.mark.parametrize(
    ("statement", "tasks"),
    [
        pytest.param("worker_claim", None, id="any-task"),
        pytest.param("worker_claim_tasks", ["p/b"], id="one-task"),
        pytest.param("worker_claim_tasks", ["p/b", "p/c"], id="two-tasks"),
    ],
)
async def test_a_claim_never_reads_a_backlog_or_the_history(
    env: Env, statement: str, tasks: list[str] | None, plan_kind: str
) -> None:
    """Rule: beside BACKLOG older queued Runs of task a and HISTORY finished Runs, a claim
    of LIMIT Runs handles at most PER_CLAIMED_MAX rows per Run in any plan node, whichever
    tasks it takes and whichever plan runs it (a worker of task b walked all of task a's
    backlog; any claim read every Attempt once the statistics knew the history)."""
    await synthetic_runs(env, HISTORY, age_ms=3_600_000, finished=True, task="a")
    await _queue(env, "a", BACKLOG, 600_000)
    await _queue(env, "b", LIMIT, 1_000)
    await _queue(env, "c", LIMIT, 2_000)
    args = ["w1", "s1", LIMIT, 30_000] + ([] if tasks is None else [tasks])
    plan, taken = await _analyzed(env, statement, args, generic=plan_kind == "generic")
    assert taken == LIMIT
    work, node = heaviest(plan)
    assert work <= PER_CLAIMED_MAX * LIMIT, (work, node)


async def test_a_worker_of_named_tasks_takes_theirs_oldest_first(env: Env) -> None:
    """Rule: a claim for named tasks takes only their claimable Runs, the oldest of all of
    them first and at most its limit; a task named twice or malformed changes nothing, and
    no task at all claims nothing."""
    await _queue(env, "a", 3, 9_000)
    await _queue(env, "b", 3, 5_000)  # queued about 5 s ago
    await _queue(env, "c", 3, 6_000)  # about 6 s ago: older than b's
    async with worker_db(env) as db:

        async def take(tasks: list[str], limit: int) -> list[tuple[str, int]]:
            claimed = await worker.claim(
                db, worker_id="w1", session_id="s1", limit=limit, lease_ms=30_000, tasks=tasks
            )
            out = []
            for c in claimed:
                row = await run_row(env, c.run_id)
                out.append((c.task_id, int(row["queued_at_ms"])))
            return sorted(out, key=lambda x: x[1])

        assert await take([], 8) == []
        first = await take(["p/c", "p/b", "p/b", "nonsense", "p/"], 4)
        assert [t for t, _ in first] == ["c", "c", "c", "b"]
        rest = await take(["p/b", "p/c"], 8)
        assert [t for t, _ in rest] == ["b", "b"]
        assert first[-1][1] <= rest[0][1]  # the oldest of b's went first
        assert await take(["p/b", "p/c"], 8) == []
    queued = await env.su_val("SELECT count(*) FROM qlsched.runs WHERE state = 'queued'")
    assert queued == 3  # task a's, which no claim named
