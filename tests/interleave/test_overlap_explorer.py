"""Every ordering of a cron admit under an overlap policy against the end of the Run
before it: a worker's finish, or its lease expiring and another worker's reap (docs/
contract.md §13).

Each ordering starts with Run 1 of a trigger running under worker A, and the trigger's
next occurrence due. Cron replica C's program is ``claim``, ``decide``, ``settle`` (the
admit); the other program is one of:

* ``finish``: A finishes Run 1 (succeeded), which releases a held Run of the trigger;
* ``expiry``: A's lease expires and worker B's reap marks it lost (no retry left), which
  releases a held Run too.

After the ordering, the replicas' runs pass runs once (the guarantee behind a worker's
release), then the world is driven to its end (every Run claimed and finished, passes
between). The oracle, per policy: under ``buffer_one`` never two Runs queued or running at
once, never two held, every held Run released exactly once and none left held; under
``skip`` never two unfinished, and no skip when Run 1 had ended before the admit began;
the occurrence is a Run or counted overlap-skipped, exactly one of the two; every Run
ends terminal.
"""

from __future__ import annotations

import pytest

from qlsched.core.outcomes import Admitted, OverlapSkipped
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.overlap import release_held
from qlsched.postgres.pool import Database, open_database
from qlsched.postgres.publish import publish
from tests.interleave.engine import Engine, Session, Step, count_orderings, orderings
from tests.interleave.tally import TALLY
from tests.interleave.test_worker_explorer import WorkerSession, _worker, _world
from tests.interleave.world import Raw, Replica
from tests.support.pg import TestDatabase

DUE_SQL = (
    "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $2,"
    " decided_from_ms = COALESCE(decided_from_ms, $2)"
    " WHERE project_id = 'o' AND trigger_id = $1"
)
NOW_SQL = "SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint"
EXPIRE_SQL = (
    "UPDATE qlsched.attempts SET lease_expires_at_ms ="
    " (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint - 1"
    " WHERE state = 'running' AND run_id IN"
    " (SELECT run_id FROM qlsched.runs WHERE trigger_id = $1)"
)
UNFINISHED_SQL = (
    "SELECT count(*) FILTER (WHERE state IN ('queued', 'running'))::int AS active,"
    " count(*) FILTER (WHERE state = 'held')::int AS held"
    " FROM qlsched.runs WHERE trigger_id = $1"
)


def _file(trigger_id: str, overlap: str) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="o")],
        tasks=[TaskEntry(project="o", id="t", command="true")],
        triggers=[
            TriggerEntry(project="o", id=trigger_id, task="t", cron="* * * * *", overlap=overlap)  # type: ignore[arg-type]
        ],
    )


async def _make_due(su: Raw, trigger_id: str) -> None:
    await su.execute(DUE_SQL, trigger_id, int(await su.fetchval(NOW_SQL)) - 1_000)


async def _cron_once(c: Replica, su: Raw, trigger_id: str) -> None:
    await _make_due(su, trigger_id)
    await c.refresh()
    await c.claim()
    await c.decide()
    await c.settle()


async def _drive(su: Raw, d: WorkerSession, runtime: Database, trigger_id: str) -> list[str]:
    """The runs pass, then every Run claimed and finished until none is unfinished."""
    problems: list[str] = []
    for _ in range(6):
        await release_held(runtime, limit=16, actor="pass")
        [counts] = await su.fetch(UNFINISHED_SQL, trigger_id)
        if counts["active"] == 0 and counts["held"] == 0:
            return problems
        if counts["active"] == 0:
            problems.append("a held Run stayed held after the runs pass")
        await d.refresh()
        await d.claim()
        await d.finish()
    problems.append("Runs left unfinished after driving")
    return problems


async def _oracle(
    su: Raw, trigger_id: str, overlap: str, c: Replica, ended_before_admit: bool
) -> list[str]:
    out: list[str] = []
    runs = await su.fetch(
        "SELECT run_id, state FROM qlsched.runs WHERE trigger_id = $1", trigger_id
    )
    released = await su.fetch(
        "SELECT run_id, count(*)::int AS n FROM qlsched.run_events"
        " WHERE type = 'run.released' AND run_id IN"
        " (SELECT run_id FROM qlsched.runs WHERE trigger_id = $1) GROUP BY run_id",
        trigger_id,
    )
    out += [f"Run released {r['n']} times" for r in released if r["n"] != 1]
    skipped = await su.fetchval(
        "SELECT overlap_skipped_total FROM qlsched.trigger_schedules WHERE trigger_id = $1",
        trigger_id,
    )
    [outcome] = [o for o in c.outcomes if o.trigger_id == trigger_id] or [None]
    admitted = isinstance(outcome, Admitted)
    if admitted + (skipped == 1) != 1 or len(runs) != 1 + admitted:
        out.append(f"occurrence: outcome {outcome!r}, skipped {skipped}, {len(runs)} Runs")
    if overlap == "skip" and ended_before_admit and isinstance(outcome, OverlapSkipped):
        out.append("skipped behind a Run that had ended before the admit")
    out += [f"Run left {r['state']}" for r in runs if r["state"] not in ("succeeded", "failed")]
    return out


PROGRAMS = {"finish": 1, "expiry": 2}
POLICIES = ("skip", "buffer_one")


@pytest.mark.parametrize("overlap", POLICIES)
@pytest.mark.parametrize("actor", list(PROGRAMS))
async def test_every_ordering_of_an_admit_and_the_end_before_it(
    pg_db: TestDatabase, actor: str, overlap: str
) -> None:
    """Every interleaving of a cron admit under `overlap` with the end of the trigger's
    running Run keeps the policy's promise: never two Runs active, a held Run released
    exactly once and never left waiting, no skip behind an ended Run, the occurrence in
    exactly one bucket; no step raises."""
    failures: list[str] = []
    explored = waits = reordered = 0
    sizes = [3, PROGRAMS[actor]]
    async with _world(pg_db) as world:
        watch = await world.connect(pg_db.superuser_dsn)
        su = await world.connect(pg_db.superuser_dsn)
        admin = await world.connect(pg_db.admin_dsn)
        c = await world.replica("c", gated=False)
        a = await _worker(world, pg_db.worker_dsn, "worker-a")
        b = await _worker(world, pg_db.worker_dsn, "worker-b")
        d = await _worker(world, pg_db.worker_dsn, "worker-d")
        runtime = await world.stack.enter_async_context(
            open_database(pg_db.runtime_dsn, max_size=1)
        )
        engine = Engine(watch.conn, world.loop, gate_pid=-1)
        for n, order in enumerate(orderings(sizes)):
            trigger_id = f"o{n}"
            await admin.call(publish, admin.conn, _file(trigger_id, overlap))
            await _cron_once(c, su, trigger_id)  # Run 1, queued
            await a.refresh()
            await a.claim()  # Run 1, running under A
            assert len(a.claimed) == 1
            await _make_due(su, trigger_id)
            await c.refresh()
            await b.refresh()

            async def expire(t: str = trigger_id) -> None:
                await su.execute(EXPIRE_SQL, t)

            program_c = [
                Step("C", "claim", c.claim),
                Step("C", "decide", c.decide),
                Step("C", "admit", c.settle),
            ]
            if actor == "finish":
                program_x = [Step("X", "finish", a.finish)]
                sessions = [Session("C", lambda: c.pids), Session("X", lambda: [a.pid])]
            else:
                program_x = [Step("X", "expire", expire), Step("X", "reap", b.reap)]
                sessions = [Session("C", lambda: c.pids), Session("X", lambda: [b.pid, su.pid])]
            trace = await engine.run([program_c, program_x], sessions, order)
            explored += 1
            waits += bool(trace.waited)
            reordered += trace.effective != trace.planned
            last_x = max(i for i, s in enumerate(trace.effective) if s.startswith("X"))
            admit_at = trace.effective.index("C.admit")
            [counts] = await su.fetch(UNFINISHED_SQL, trigger_id)
            problems = [f"{s} raised {e!r}" for s, e in trace.errors.items()]
            if counts["active"] > 1 or counts["held"] > 1:
                problems.append(f"{counts['active']} active and {counts['held']} held Runs")
            if counts["held"] and not counts["active"]:
                # The end of Run 1 came after the admit: its worker's release must have run.
                problems.append("a held Run waits with nothing active before any pass")
            problems += await _drive(su, d, runtime, trigger_id)
            problems += await _oracle(su, trigger_id, overlap, c, last_x < admit_at)
            # Parked: its next occurrence falls due a minute later, and a later ordering's
            # claim must find only its own trigger.
            await su.execute(
                "UPDATE qlsched.trigger_schedules SET active = false WHERE trigger_id = $1",
                trigger_id,
            )
            if problems:
                failures.append(
                    f"{actor}/{overlap} [{' '.join(trace.effective)}]: " + "; ".join(problems)
                )
    TALLY.explorations += 1
    TALLY.orderings += explored
    TALLY.waits += waits
    TALLY.reordered += reordered
    TALLY.failed += len(failures)
    TALLY.lines.extend(failures)
    assert explored == count_orderings(sizes)
    assert not failures, "\n".join(failures)
