"""Observability reads stay bounded however large the tables (issue #20 item 7).

``/v1/schedules`` pages by key: every row present throughout is seen exactly once across
pages while rows are inserted between them. The due backlog is counted up to a limit and
says when it stopped. Each read behind ``status``, ``/metrics`` and ``/v1/schedules`` walks
an index for a bounded number of entries: its plan, custom and generic, reads no big table
by a sequential scan and sorts nothing but an already bounded set.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres import observe
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.queries import query
from qlsched.postgres.reader import open_reader
from qlsched.tools import bench_data
from qlsched.tools.bench_data import PROJECT, TASK, TASK_COMMAND, RowState
from qlsched.tools.queries import tool_query
from tests.integration.adapter_support import Env, trigger

BIG_TABLES = frozenset({"trigger_schedules", "triggers", "runs"})


async def load(env: Env, rows: int, state: RowState, *, history: int = 0) -> None:
    """``rows`` bench triggers (t0000001..) in ``state``, and ``history`` terminal Runs."""

    async def fn(conn: Connection) -> None:
        now = await bench_data.now_ms(conn)
        await bench_data.load_triggers(
            conn, rows, crons=["* * * * *"], misfire="skip", grace_ms=60_000, now_ms=now
        )
        placed = RowState(
            due_pct=state.due_pct,
            claimed_from=state.claimed_from,
            inactive_pct=state.inactive_pct,
            due_at_ms=now - 1_000,
            later_ms=now + 86_400_000,
        )
        await bench_data.load_schedules(conn, rows, placed, now_ms=now)
        if history:
            async with conn.transaction():
                await conn.execute(tool_query("bench_fast_load"))
                await conn.execute(tool_query("bench_history_runs"), history, 0, now)
        await conn.execute("VACUUM (ANALYZE) qlsched.trigger_schedules, qlsched.triggers")
        await conn.execute("ANALYZE qlsched.runs")

    await connect_once(env.db.superuser_dsn, fn)


def publish_file(ids: list[str]) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id=PROJECT)],
        tasks=[TaskEntry(project=PROJECT, id=TASK, command=TASK_COMMAND)],
        triggers=[trigger(PROJECT, i, task=TASK) for i in ids],
    )


async def test_pages_see_every_row_once_while_rows_are_inserted(env: Env) -> None:
    """Rule: paging ``/v1/schedules``'s reader by key (each page after the last key of the
    one before) returns every row present from the first page to the last exactly once, in
    key order, while triggers are published between pages: those inserted behind the
    cursor are not seen, those ahead of it are seen once, and no row moves across a page."""
    await load(env, 300, RowState())
    behind = [f"a{i:03d}" for i in range(12)]  # sort before every t... id
    ahead = [f"z{i:03d}" for i in range(12)]  # sort after them, each after the one before
    inserted: list[str] = []
    seen: list[tuple[str, str]] = []
    async with open_reader(env.db.runtime_dsn) as reader:
        page = await reader.list_schedules(37)
        while page:
            assert len(seen) < 1000, "paging does not end"
            seen += [(v.project_id, v.trigger_id) for v in page]
            if len(inserted) < len(ahead):
                new = [behind[len(inserted)], ahead[len(inserted)]]
                await env.publish(publish_file(new))
                inserted.append(new[1])
            page = await reader.list_schedules_after(seen[-1], 37)
    ids = [t for _, t in seen]
    assert len(ids) == len(set(ids)), "a row was seen twice"
    assert seen == sorted(seen)
    assert len(inserted) > 300 // 37, "rows were inserted between every page"
    original = {bench_data.trigger_id(i) for i in range(1, 301)}
    assert set(ids) == original | set(inserted)


async def test_the_backlog_is_counted_up_to_its_limit(env: Env) -> None:
    """Rule: the bounded backlog counts active due rows, unclaimed and validly claimed, and
    inactive or not-due rows never; below its limit it is exact (not capped), past it the
    count is the limit and says it is capped (one row more than the limit is read)."""
    # 400 rows: buckets 0..9 inactive, 0..59 due, due buckets 30.. claimed (valid lease):
    # due and active = buckets 10..59 = 200 rows, 120 of them claimed.
    await load(env, 400, RowState(due_pct=60, claimed_from=30, inactive_pct=10))

    async def count(limit: int) -> observe.DueBacklog:
        async def fn(conn: Connection) -> observe.DueBacklog:
            return await observe.due_backlog(conn, limit=limit)

        return await env.runtime(fn)

    exact = int(await env.su_val(query("due_backlog")))
    assert exact == 200
    assert await count(1000) == observe.DueBacklog(rows=200, capped=False, limit=1000)
    assert await count(200) == observe.DueBacklog(rows=200, capped=False, limit=200)
    assert await count(199) == observe.DueBacklog(rows=199, capped=True, limit=199)
    assert await count(50) == observe.DueBacklog(rows=50, capped=True, limit=50)
    async with open_reader(env.db.runtime_dsn) as reader:
        assert await reader.due_backlog() == 200


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for child in node.get("Plans", []):
        out.extend(nodes(child))
    return out


def unbounded_sorts(node: dict[str, Any], *, under_sort: bool = False) -> list[str]:
    """Big tables read below a Sort with no Limit between them (a sort of the table)."""
    found: list[str] = []
    kind = node["Node Type"]
    if under_sort and node.get("Relation Name") in BIG_TABLES:
        found.append(node["Relation Name"])
    inside = (under_sort or kind == "Sort") and kind != "Limit"
    for child in node.get("Plans", []):
        found += unbounded_sorts(child, under_sort=inside)
    return found


def check_plan(plan_json: str, *, indexes: set[str]) -> None:
    [explained] = json.loads(plan_json)
    every = nodes(explained["Plan"])
    scans = [n for n in every if n.get("Relation Name") in BIG_TABLES]
    assert scans, plan_json
    assert all("Seq Scan" not in n["Node Type"] for n in scans), plan_json
    assert indexes <= {n.get("Index Name") for n in every}, plan_json
    assert unbounded_sorts(explained["Plan"]) == [], plan_json


READS = {
    "due_backlog_bounded": (
        ["1001"],
        {"trigger_schedules_claim_idx", "trigger_schedules_expiry_idx"},
    ),
    "list_schedules": (["1000"], {"trigger_schedules_pkey"}),
    "list_schedules_after": (["'bench'", "'t0015000'", "1000"], {"trigger_schedules_pkey"}),
    "refused_due_triggers": (
        ["1000", "1000"],
        {"trigger_schedules_claim_idx", "trigger_schedules_expiry_idx"},
    ),
    "status_schedules": (["1000"], {"trigger_schedules_pkey"}),
    "status_schedules_after": (["'bench'", "'t0015000'", "1000"], {"trigger_schedules_pkey"}),
    "recent_runs": (["10"], {"runs_created_idx"}),
}


@pytest.mark.parametrize("name", sorted(READS))
async def test_observability_reads_walk_indexes(env: Env, name: str) -> None:
    """Rule: on 20,000 analysed schedule rows (2 % due, half of those validly claimed)
    and 50,000 Runs, each read behind ``status``, ``/metrics`` and ``/v1/schedules``, with
    a custom plan and with the generic plan a long-lived prepared statement may switch to,
    walks its index (named here), reads no big table by a sequential scan and sorts no big
    table (a Sort only above a Limit)."""
    await load(env, 20_000, RowState(due_pct=2, claimed_from=1), history=50_000)
    args, indexes = READS[name]
    sql = query(name)
    literal = sql
    for i, value in reversed(list(enumerate(args, start=1))):
        literal = literal.replace(f"${i}", value)

    async def custom(conn: Connection) -> str:
        return str(await conn.fetchval("EXPLAIN (FORMAT JSON) " + literal))

    async def generic(conn: Connection) -> str:
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE observe_plan AS {sql}")
            try:
                return str(
                    await conn.fetchval(
                        f"EXPLAIN (FORMAT JSON) EXECUTE observe_plan({', '.join(args)})"
                    )
                )
            finally:
                await conn.execute("DEALLOCATE observe_plan")

    check_plan(await connect_once(env.db.observer_dsn, custom), indexes=indexes)
    check_plan(await connect_once(env.db.observer_dsn, generic), indexes=indexes)
