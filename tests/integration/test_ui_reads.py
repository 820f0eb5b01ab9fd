"""The dashboard's reads stay bounded however large the tables (DESIGN §14: each page within
100 ms at a million triggers and ten million Runs, measured by the bench's observe phase).

Each list the dashboard shows walks an index from a key for at most its page: its plan,
custom and the generic one a long-lived prepared statement may switch to, reads no big
table by a sequential scan and sorts nothing but an already bounded set (the same check as
the status and ``/v1/schedules`` reads).
"""

from __future__ import annotations

from qlsched.postgres import ui
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.queries import query
from qlsched.tools import bench_data
from qlsched.tools.bench_data import PROJECT, RowState
from tests.integration.adapter_support import Env
from tests.integration.test_observe import check_plan, load

TOP = "4611686018427387903"
MAX_ID = "'ffffffff-ffff-ffff-ffff-ffffffffffff'"
P = f"'{PROJECT}'"

READS = {
    "ui_schedules": (["''", "''", P, "''", "''", "''", "51", "10000"], {"trigger_schedules_pkey"}),
    "ui_schedules:project": (
        [P, "'t0005000'", P, P, "''", "'paused'", "51", "10000"],
        {"trigger_schedules_pkey", "runs_trigger_idx"},
    ),
    "ui_schedules:search": (
        ["''", "''", P, "''", "'t00001'", "''", "51", "10000"],
        {"trigger_schedules_pkey"},
    ),
    "ui_schedules_walk_end": (["''", "''", P, "10000"], {"trigger_schedules_pkey"}),
    "ui_trigger_runs": ([P, "'history'", TOP, "51"], {"runs_trigger_idx"}),
    "ui_trigger_runs_at": ([P, "'history'", "1000", "1000"], {"runs_trigger_idx"}),
    "ui_runs": ([TOP, MAX_ID, "0", "''", "51"], {"runs_created_idx"}),
    "ui_runs_in_state": ([TOP, MAX_ID, "0", "'failed'", "51"], {"runs_state_created_idx"}),
    "ui_recent_owners": (["1000"], {"runs_created_idx"}),
    "ui_failed_since": (["0", "10001"], {"runs_state_idx"}),
    "ui_claims_now": (["0", "10000"], {"trigger_schedules_expiry_idx"}),
}


async def test_dashboard_reads_walk_indexes(env: Env) -> None:
    """Rule: on 20,000 analysed schedule rows and 50,000 Runs each dashboard read (all in
    one test: one load), with a custom and with a generic plan, walks its index (named
    here), reads no big table by a sequential scan and sorts no big table (a Sort only
    above a Limit)."""
    await load(env, 20_000, RowState(due_pct=2, claimed_from=1), history=50_000)
    for name, (args, indexes) in sorted(READS.items()):
        sql = query(name.partition(":")[0])
        literal = sql
        for i, value in reversed(list(enumerate(args, start=1))):
            literal = literal.replace(f"${i}", value)

        async def custom(conn: Connection, literal: str = literal) -> str:
            return str(await conn.fetchval("EXPLAIN (FORMAT JSON) " + literal))

        async def generic(conn: Connection, sql: str = sql, args: list[str] = args) -> str:
            async with conn.transaction():
                await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                await conn.execute(f"PREPARE ui_plan AS {sql}")
                try:
                    return str(
                        await conn.fetchval(
                            f"EXPLAIN (FORMAT JSON) EXECUTE ui_plan({', '.join(args)})"
                        )
                    )
                finally:
                    await conn.execute("DEALLOCATE ui_plan")

        for plan in (custom, generic):
            try:
                check_plan(await connect_once(env.db.observer_dsn, plan), indexes=indexes)
            except AssertionError as exc:
                raise AssertionError(f"{name} ({plan.__name__} plan): {exc}") from None


async def test_a_filtered_walk_is_bounded_and_pages_see_each_match_once(env: Env) -> None:
    """Rule: a filter that matches few rows walks at most ``walk`` keys per page and says
    where it stopped; following the resume keys to the end finds every match exactly once,
    in key order, and the unfiltered pages see every row once."""
    await load(env, 300, RowState(due_pct=0, claimed_from=0))

    async def walk_all(search: str, limit: int, walk: int) -> tuple[list[str], int]:
        async def fn(conn: Connection) -> tuple[list[str], int]:
            seen: list[str] = []
            pages = 0
            after: tuple[str, str] | None = ("", "")
            while after is not None:
                page = await ui.schedules(conn, after=after, search=search, limit=limit, walk=walk)
                assert len(page.rows) <= limit
                seen += [r.trigger_id for r in page.rows]
                after = page.resume
                pages += 1
            return seen, pages

        return await connect_once(env.db.observer_dsn, fn)

    matches, pages = await walk_all("t00001", limit=50, walk=60)
    assert matches == [bench_data.trigger_id(i) for i in range(100, 200)]
    assert pages >= 300 // 60
    every, _ = await walk_all("", limit=50, walk=60)
    assert every == sorted(every)
    assert len(every) == len(set(every)) == 300


async def test_a_triggers_runs_page_by_occurrence_and_keep_ties_together(env: Env) -> None:
    """Rule: paging one trigger's Runs by occurrence (pages of 2) sees every Run exactly
    once, newest occurrence first, even when several Runs share an occurrence across a page
    boundary (the page takes all of its last occurrence's Runs)."""
    times = [5, 4, 4, 4, 3, 2, 2, 1]
    insert = (
        "INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,"
        " task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state,"
        " owner, queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,"
        " admitted_claim_version) SELECT gen_random_uuid(), 'p', 't', 1, 'k', 1,"
        " gen_random_uuid(), s * 1000, 'key:' || i, 'queued', 'runtime', 0, 0, 'r',"
        " gen_random_uuid(), 1 FROM unnest($1::bigint[]) WITH ORDINALITY AS u(s, i)"
    )

    async def fill(conn: Connection) -> None:
        await conn.execute(insert, times)

    await connect_once(env.db.superuser_dsn, fill)

    async def walk(conn: Connection) -> list[int]:
        seen: list[int] = []
        ids: set[str] = set()
        before = ui.BIG_MS
        while True:
            page = await ui.trigger_runs(conn, "p", "t", before_ms=before, limit=2)
            for r in page:
                assert str(r.run_id) not in ids
                ids.add(str(r.run_id))
            seen += [r.scheduled_for_ms // 1000 for r in page]
            if len(page) < 2:
                return seen
            before = page[-1].scheduled_for_ms

    assert await connect_once(env.db.observer_dsn, walk) == times


async def test_the_failing_filter_finds_failing_admissions(env: Env) -> None:
    """Rule: state "failing" lists the schedules whose admissions are failing (failures >
    0), with their count and reason, and no other."""
    await load(env, 50, RowState(due_pct=0, claimed_from=0))

    async def fail_two(conn: Connection) -> None:
        await conn.execute(
            "UPDATE qlsched.trigger_schedules SET failures = 3, last_failure = 'refused:spec'"
            " WHERE trigger_id IN ($1, $2)",
            bench_data.trigger_id(7),
            bench_data.trigger_id(30),
        )

    await connect_once(env.db.superuser_dsn, fail_two)

    async def failing(conn: Connection) -> ui.SchedulePage:
        return await ui.schedules(conn, state="failing")

    page = await connect_once(env.db.observer_dsn, failing)
    assert [(r.trigger_id, r.failures, r.last_failure) for r in page.rows] == [
        (bench_data.trigger_id(7), 3, "refused:spec"),
        (bench_data.trigger_id(30), 3, "refused:spec"),
    ]
