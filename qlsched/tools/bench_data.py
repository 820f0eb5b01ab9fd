"""The benchmark's database side: bulk loads, state changes, measurements, pgbench scripts.

Role: everything ``qlsched bench`` (``qlsched.bench``) says to PostgreSQL, one function per
named block of ``sql/bench.sql``, each taking a connection (the caller decides which role and
pool). The loads and resets run as the superuser on a database the bench made for itself:
they write trigger and schedule rows directly (``generate_series``, foreign-key triggers
skipped), far faster than publishing them, and move cursors behind the protocol's back. The
statements the bench *measures* are the product's own: ``claim_timings`` and
``explain_claim`` run the ``claim`` block, and ``render_pgbench`` turns the ``claim`` and
``admit`` blocks into a pgbench script.

What the database decides: every time the bench reports about the database (cursors, queue
times, lag) is the database clock's; only ``claim_timings`` times on this process's clock,
around one statement.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import msgspec

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres.pool import Connection
from qlsched.postgres.publish import publish
from qlsched.postgres.queries import query
from qlsched.tools.queries import tool_query

PROJECT = "bench"
TASK = "bench"
TASK_COMMAND = "true"
HOLDER = "bench-holder"
"""The owner of the claims ``load_schedules`` writes as validly held."""


def trigger_id(ordinal: int) -> str:
    """The id of bulk-loaded trigger ``ordinal`` (from 1), as ``bench_load_triggers`` writes it."""
    return f"t{ordinal:07d}"


class RowState(msgspec.Struct, frozen=True, kw_only=True):
    """How ``load_schedules`` writes the rows; bucket b = (ordinal - 1) % 100 of each row.

    Buckets ``b < inactive_pct`` are inactive; ``b < paused_pct`` are paused (inactive, as
    ``qlsched pause`` leaves a row); ``b < due_pct`` are due at ``due_at_ms``, the
    others not due (a distinct cursor after ``later_ms``); due rows with
    ``b >= claimed_from`` hold a valid claim (an hour's lease) by ``HOLDER``.
    """

    due_pct: int = 0
    claimed_from: int = 100
    inactive_pct: int = 0
    paused_pct: int = 0
    due_at_ms: int = 0
    later_ms: int = 0


class ServerFacts(msgspec.Struct, frozen=True):
    version: str
    shared_buffers: str
    fsync: str
    synchronous_commit: str
    max_connections: str
    isolation: str


class ClaimPlan(msgspec.Struct, frozen=True):
    """The claim statement's plan as EXPLAIN (ANALYZE, FORMAT JSON) reported it."""

    nodes: list[str]
    """Node types in pre-order, each with the index or relation it reads, e.g.
    ``Index Scan (trigger_schedules_claim_idx)``."""
    planning_ms: float
    execution_ms: float
    """With EXPLAIN's own instrumentation overhead."""


class RunsWindow(msgspec.Struct, frozen=True):
    """Runs whose occurrence lies in a window; lag = queued_at - scheduled_for (ms)."""

    runs: int
    first_queued_ms: int | None
    last_queued_ms: int | None
    lag_p50_ms: int | None
    lag_p95_ms: int | None
    lag_p99_ms: int | None
    lag_max_ms: int | None


# ---------------------------------------------------------------------------------------------
# Loads (superuser)


async def reset(conn: Connection) -> None:
    """Empty every qlsched table."""
    await conn.execute(tool_query("bench_reset"))


async def reset_runs(conn: Connection) -> None:
    """Empty the history, keep the triggers and schedule rows (``bench_reset_runs``)."""
    await conn.execute(tool_query("bench_reset_runs"))


async def load_triggers(
    conn: Connection,
    count: int,
    *,
    crons: Sequence[str],
    misfire: str,
    grace_ms: int,
    now_ms: int,
) -> None:
    """Publish the bench project and task (the product's publish), then bulk-load ``count``
    triggers t0000001.. on that task; trigger i gets ``crons[(i - 1) % len(crons)]``.
    No schedule rows: ``load_schedules`` writes them."""
    if not 1 <= count <= 9_999_999 or not crons:
        raise ValueError("1..9,999,999 triggers and at least one cron expression")
    spec = PublishFile(
        projects=[ProjectEntry(id=PROJECT)],
        tasks=[TaskEntry(project=PROJECT, id=TASK, command=TASK_COMMAND)],
    )
    await publish(conn, spec)
    async with conn.transaction():
        await conn.execute(tool_query("bench_fast_load"))
        await conn.execute(
            tool_query("bench_load_triggers"),
            PROJECT,
            TASK,
            count,
            list(crons),
            misfire,
            grace_ms,
            now_ms,
        )


async def load_schedules(conn: Connection, count: int, state: RowState, *, now_ms: int) -> None:
    """(Re)write the schedule rows of triggers t0000001..``count`` in ``state``: the table is
    emptied first, so the rows are fresh (no dead versions from an earlier state)."""
    async with conn.transaction():
        await conn.execute(tool_query("bench_truncate_schedules"))
        await conn.execute(tool_query("bench_fast_load"))
        await conn.execute(
            tool_query("bench_load_schedules"),
            PROJECT,
            count,
            state.due_at_ms,
            state.due_pct,
            state.claimed_from,
            state.inactive_pct,
            now_ms,
            state.later_ms,
            state.paused_pct,
        )


async def load_not_due(
    conn: Connection,
    count: int,
    *,
    crons: Sequence[str],
    misfire: str,
    grace_ms: int,
    reuse: bool = False,
) -> bool:
    """Empty tables, then ``count`` triggers (``load_triggers``) whose schedule rows are not
    due for a day: loaded before the replicas start, due when the bench moves the cursors.

    ``reuse``: when the bench project already holds exactly these triggers (one cron, the
    same policy), keep them and empty only the history; the schedule rows are rewritten
    either way. Returns whether they were reused."""
    reused = reuse and len(crons) == 1 and await _loaded(conn, count, crons[0], misfire, grace_ms)
    now = await now_ms(conn)
    if reused:
        await reset_runs(conn)
    else:
        await reset(conn)
        await load_triggers(
            conn, count, crons=crons, misfire=misfire, grace_ms=grace_ms, now_ms=now
        )
    await load_schedules(conn, count, RowState(later_ms=now + 86_400_000), now_ms=now)
    await vacuum(conn)
    return reused


async def _loaded(conn: Connection, count: int, cron: str, misfire: str, grace_ms: int) -> bool:
    row = await conn.fetchrow(tool_query("bench_loaded_triggers"), PROJECT, cron, misfire, grace_ms)
    return row is not None and row["triggers"] == count and row["matching"] == count


async def set_cursors(conn: Connection, cursors: Sequence[int]) -> int:
    """Move every row's cursor (trigger i to ``cursors[(i - 1) % len(cursors)]``) in one
    statement; returns the rows moved."""
    return int(await conn.fetchval(tool_query("bench_set_cursors"), PROJECT, list(cursors)))


async def vacuum(conn: Connection) -> None:
    """VACUUM (ANALYZE) the trigger and schedule tables (not inside a transaction), then a
    CHECKPOINT, so that every measured phase starts from the same WAL state and no
    checkpoint the load made due falls inside it. (Suspected, in a sweep whose later steps
    drained 10-20 % slower; the checkpoint alone did not remove that, the replicas'
    start-up did: ``replicas.wait_warm``.)"""
    await conn.execute(tool_query("bench_vacuum"))
    await conn.execute(tool_query("bench_checkpoint"))


# ---------------------------------------------------------------------------------------------
# Reads


async def now_ms(conn: Connection) -> int:
    return int(await conn.fetchval(tool_query("bench_now_ms")))


async def server_facts(conn: Connection) -> ServerFacts:
    row = await conn.fetchrow(tool_query("bench_server_facts"))
    assert row is not None
    return ServerFacts(**dict(row))


async def sessions_of(conn: Connection, role: str) -> int:
    return int(await conn.fetchval(tool_query("bench_sessions_of"), role))


async def run_count(conn: Connection, first_ms: int, last_ms: int) -> int:
    """Runs whose occurrence lies in ``[first_ms, last_ms]``."""
    return int(await conn.fetchval(tool_query("bench_run_count"), first_ms, last_ms))


async def runs_window(conn: Connection, first_ms: int, last_ms: int) -> RunsWindow:
    """Count, queue times and lag percentiles of the Runs in ``[first_ms, last_ms]``."""
    row = await conn.fetchrow(tool_query("bench_runs_window"), first_ms, last_ms)
    assert row is not None
    lag: list[int] = list(row["lag_ms"] or [None, None, None])
    return RunsWindow(
        runs=int(row["runs"]),
        first_queued_ms=row["first_queued_ms"],
        last_queued_ms=row["last_queued_ms"],
        lag_p50_ms=lag[0],
        lag_p95_ms=lag[1],
        lag_p99_ms=lag[2],
        lag_max_ms=row["lag_max_ms"],
    )


# ---------------------------------------------------------------------------------------------
# The claim statement, measured


class ClaimTimings(msgspec.Struct, frozen=True, kw_only=True):
    """Durations in nanoseconds, one per repetition, taken in turn in the same loop: the claim
    of ``limit`` rows, the claim of one row, and a bare round trip (``SELECT 1``) on the same
    connection, the floor that this machine's scheduling and network stack put under any
    statement at those moments."""

    claims: list[int]
    single: list[int]
    round_trip: list[int]


async def claim_timings(
    conn: Connection,
    *,
    owner: str,
    limit: int,
    lease_ms: int,
    repetitions: int,
    warmup: int = 20,
) -> ClaimTimings:
    """Run the replicas' claim statement for ``limit`` rows and for one row, and a bare round
    trip, in turn, ``warmup + repetitions`` times; keep the last ``repetitions`` of each.

    Each is timed alone, from sending the prepared statement to its rows (the driver's own
    work included). The claims run inside a transaction that is then rolled back, so the table
    keeps its state from one repetition to the next and the commit is not part of the figure.
    Taking the three in turn puts a burst of noise from the machine on all three alike.
    """
    claim = await conn.prepare(query("claim"))
    bare = await conn.prepare(tool_query("bench_round_trip"))
    out = ClaimTimings(claims=[], single=[], round_trip=[])
    for i in range(warmup + repetitions):
        for k, samples in ((limit, out.claims), (1, out.single)):
            transaction = conn.transaction()
            await transaction.start()
            try:
                started = time.perf_counter_ns()
                await claim.fetch(owner, k, lease_ms, 0)
                elapsed = time.perf_counter_ns() - started
            finally:
                await transaction.rollback()
            if i >= warmup:
                samples.append(elapsed)
        started = time.perf_counter_ns()
        await bare.fetch()
        elapsed = time.perf_counter_ns() - started
        if i >= warmup:
            out.round_trip.append(elapsed)
    return out


async def explain_claim(conn: Connection, *, owner: str, limit: int, lease_ms: int) -> ClaimPlan:
    """The claim's executed plan (EXPLAIN ANALYZE, rolled back): its nodes and the server's
    planning and execution times."""
    statement = await conn.prepare(query("claim"))
    explained: Any = await statement.explain(owner, limit, lease_ms, 0, analyze=True)
    if isinstance(explained, str):  # a driver that hands back the JSON text
        explained = json.loads(explained)
    nodes: list[str] = []

    def walk(node: Mapping[str, Any]) -> None:
        name = str(node.get("Node Type", "?"))
        target = node.get("Index Name") or node.get("Relation Name") or node.get("CTE Name")
        nodes.append(f"{name} ({target})" if target else name)
        for child in node.get("Plans", ()):
            walk(child)

    top = explained[0]
    walk(top["Plan"])
    return ClaimPlan(
        nodes=nodes,
        planning_ms=float(top.get("Planning Time", 0.0)),
        execution_ms=float(top.get("Execution Time", 0.0)),
    )


# ---------------------------------------------------------------------------------------------
# pgbench scripts

_DIRECTIVE = re.compile(r"^-- @([a-z_]+)(?: ending ([a-z_]+))?\s*$")
_FINAL_SELECT = re.compile(r"^SELECT ", re.M)
_PARAMETER = re.compile(r"^--\s+\$(\d+)\s*:=\s*(.+?)\s*$")
_QUOTED_COLON = re.compile(r":(?=[A-Za-z0-9_])")
_VARIABLE = re.compile(r"(?<!:):([A-Za-z_][A-Za-z0-9_]*)")
_DRAWN = re.compile(r"\b(?:gen_random_uuid|random|clock_timestamp|nextval)\s*\(")
"""A pgbench expression that draws a new value each time it is evaluated: pasted for a
``$n`` the statement reads twice, the two reads would disagree (a parameter is one value)."""


def pgbench_template(name: str) -> str:
    """The text of ``qlsched/tools/pgbench/NAME.sql``."""
    return (
        resources.files("qlsched.tools")
        .joinpath("pgbench", f"{name}.sql")
        .read_text(encoding="utf-8")
    )


def render_pgbench(template: str) -> str:
    """A runnable pgbench script from a template (see ``pgbench/pair.sql``): every
    ``-- @NAME`` line becomes named block NAME, its ``$n`` replaced by the expressions listed
    under it; comment lines are dropped, other lines kept.

    Raises:
        ValueError: a block has a ``$n`` without an expression, or an expression no ``$n``.
    """
    lines = template.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        directive = _DIRECTIVE.match(lines[i])
        i += 1
        if directive is None:
            # Comments go: pgbench would read a ':word' in them as a variable.
            if not lines[i - 1].lstrip().startswith("--"):
                out.append(lines[i - 1])
            continue
        values: dict[int, str] = {}
        while i < len(lines) and (parameter := _PARAMETER.match(lines[i])):
            values[int(parameter.group(1))] = parameter.group(2)
            i += 1
        name, ending = directive.group(1), directive.group(2)
        sql = query(name) if ending is None else with_ending(query(name), tool_query(ending))
        out.append(_pgbench_statement(name, sql, values))
    return "\n".join(out) + "\n"


def with_ending(sql: str, ending: str) -> str:
    """``sql`` (a ``WITH ...`` statement) with its final top-level SELECT (the last line
    that starts with ``SELECT``) replaced by ``ending``, which reads the same CTEs."""
    finals = list(_FINAL_SELECT.finditer(sql))
    if not finals:
        raise ValueError("the statement has no top-level SELECT to replace")
    return sql[: finals[-1].start()] + ending


def pgbench_variables(script: str) -> set[str]:
    """The ``:name`` variables a rendered script reads."""
    return set(_VARIABLE.findall(script))


def _pgbench_statement(name: str, sql: str, values: Mapping[int, str]) -> str:
    """``sql`` without comments, quoted ':' split off, ``$n`` replaced by ``values[n]``."""
    out: list[str] = []
    used: set[int] = set()
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise ValueError(f"block {name}: unterminated comment")
            i = end + 2
        elif c in "'\"":
            end = i + 1
            while True:
                end = sql.find(c, end)
                if end < 0:
                    raise ValueError(f"block {name}: unterminated quote")
                if sql.startswith(c * 2, end):
                    end += 2
                    continue
                break
            quoted = sql[i : end + 1]
            out.append(_QUOTED_COLON.sub(":' || '", quoted) if c == "'" else quoted)
            i = end + 1
        elif c == "$" and i + 1 < n and sql[i + 1].isdigit():
            end = i + 1
            while end < n and sql[end].isdigit():
                end += 1
            number = int(sql[i + 1 : end])
            if number not in values:
                raise ValueError(f"block {name}: ${number} has no pgbench expression")
            if number in used and _DRAWN.search(values[number]):
                raise ValueError(
                    f"block {name}: ${number} is read more than once, and its expression"
                    " draws a new value at each use"
                )
            out.append(values[number])
            used.add(number)
            i = end
        elif c == "$":
            raise ValueError(f"block {name}: dollar quoting is not supported")
        else:
            out.append(c)
            i += 1
    unused = sorted(set(values) - used)
    if unused:
        raise ValueError(f"block {name}: no ${unused[0]} to replace")
    return "\n".join(line.rstrip() for line in "".join(out).splitlines() if line.strip())
