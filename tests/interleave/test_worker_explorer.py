"""Every ordering of a worker's Attempt (claim, heartbeat, finish) against lease expiry,
a second worker and cancel (docs/contract.md §13).

Worker A's program is ``claim``, ``heartbeat``, ``finish`` (succeeded), each one statement
of the product (``qlsched.postgres.worker``). The actors:

* ``expiry``: the lease expires (superuser moves it into the database's past), worker B
  reaps it (lost, then the retry policy: max_attempts 2) and claims the retry (B takes
  only the task ``w/t``: its claim is the task-filtered statement, A's the any-task one);
* ``cancel``: the admin's cancel in an open transaction (the Run locked), then its commit;
* ``expiry_cancel``: the lease expires, the admin cancels (one transaction), B reaps.

After each ordering the Run is driven to its end (expired leases reaped, fresh claims
finished, a cancel request honoured), then the oracle checks: the Run is terminal with
exactly one terminal event, the last; event numbers run 1..n; Attempts are numbered 1..k
with k at most max_attempts, every one but the last ended lost or failed; A's finish was
accepted only if its Attempt ended succeeded; a cancel that found the Run queued left no
Attempt that ran. The engine runs each step until done or waiting on a lock.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio_asyncio

from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.core.work import (
    CancelledQueued,
    ClaimedRun,
    Extended,
    Finished,
    JobResult,
)
from qlsched.postgres import worker
from qlsched.postgres.cancel import cancel_run
from qlsched.postgres.pool import Database, open_database
from qlsched.postgres.publish import publish
from tests.interleave.engine import Engine, Session, Step, count_orderings, orderings
from tests.interleave.tally import TALLY
from tests.interleave.world import Raw, World
from tests.support.pg import TestDatabase

LEASE_MS = 30_000
OK = JobResult(end="succeeded", code="succeeded", exit_code=0)
TERMINAL = ("run.succeeded", "run.failed", "run.cancelled")
EXPIRE_SQL = (
    "UPDATE qlsched.attempts SET lease_expires_at_ms ="
    " (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint - 1"
    " WHERE state = 'running' AND run_id = $1"
)
QUEUE_SQL = """
WITH t AS (SELECT * FROM qlsched.triggers WHERE trigger_id = 'wx'),
r AS (
    INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
        task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state, owner,
        queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,
        admitted_claim_version)
    SELECT $1::uuid, t.project_id, t.trigger_id, t.revision, t.task_id, t.task_revision,
        t.execution_revision_id, 0, 'explore:' || $1, 'queued', 'runtime', 0, 0, 'explorer',
        gen_random_uuid(), 1 FROM t
    RETURNING run_id),
a AS (INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
        created_at_ms) SELECT gen_random_uuid(), run_id, 1, 'remote_worker', 'claimed', 0 FROM r)
INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
SELECT gen_random_uuid(), run_id, e.seq, e.type, 0, 'explorer'
  FROM r CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS e(seq, type)
"""
FILE = PublishFile(
    projects=[ProjectEntry(id="w")],
    tasks=[TaskEntry(project="w", id="t", command="true", max_attempts=2)],
    triggers=[TriggerEntry(project="w", id="wx", task="t", cron="0 0 1 1 *")],
)


class WorkerSession:
    """A worker over one pooled connection (its backend is known), one Attempt's state."""

    def __init__(self, name: str, db: Database, tasks: list[str] | None = None) -> None:
        self.name = name
        self.db = db
        self.tasks = tasks
        self.pid = 0
        self.claimed: list[ClaimedRun] = []
        self.outcomes: list[Any] = []
        self.finishes: list[Any] = []

    async def refresh(self) -> None:
        self.claimed, self.outcomes, self.finishes = [], [], []

        async def pid(conn: Any) -> int:
            return int(await conn.fetchval("SELECT pg_catalog.pg_backend_pid()"))

        self.pid = await self.db.run(pid)

    async def claim(self) -> None:
        self.claimed = await worker.claim(
            self.db,
            worker_id=self.name,
            session_id=self.name,
            limit=1,
            lease_ms=LEASE_MS,
            tasks=self.tasks,
        )

    async def heartbeat(self) -> None:
        for c in self.claimed:
            self.outcomes.append(
                await worker.heartbeat(
                    self.db, attempt_id=c.attempt_id, lease_token=c.lease_token, lease_ms=LEASE_MS
                )
            )

    async def finish(self) -> None:
        for c in self.claimed:
            self.finishes.append(
                await worker.finish(
                    self.db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=OK
                )
            )

    async def reap(self) -> None:
        self.outcomes.extend(await worker.reap(self.db, limit=4, actor=self.name))


class Canceller:
    """The admin's cancel, in a transaction the explorer commits as a separate step."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw
        self.tx: Any = None
        self.outcome: Any = None

    async def open(self, run_id: str) -> None:
        self.tx = self.raw.conn.transaction()
        await self.raw.call(self.tx.start)
        self.outcome = await self.raw.call(cancel_run, self.raw.conn, run_id, note=None, actor=None)

    async def commit(self) -> None:
        if self.tx is not None:
            await self.raw.call(self.tx.commit)
            self.tx = None

    async def once(self, run_id: str) -> None:
        self.outcome = await self.raw.call(cancel_run, self.raw.conn, run_id, note=None, actor=None)


@contextlib.asynccontextmanager
async def _world(db: TestDatabase) -> AsyncIterator[World]:
    async with trio_asyncio.open_loop() as loop, contextlib.AsyncExitStack() as stack:
        yield World(loop, stack, db.superuser_dsn, db.admin_dsn, db.runtime_dsn)


async def _worker(
    world: World, dsn: str, name: str, tasks: list[str] | None = None
) -> WorkerSession:
    db = await world.stack.enter_async_context(open_database(dsn, max_size=1))
    return WorkerSession(name, db, tasks)


async def _drive(su: Raw, d: WorkerSession, run_id: str) -> None:
    """Drive the Run to its end: expired leases reaped, claims finished (cancelled when
    the heartbeat says so)."""
    for _ in range(6):
        state = await su.fetchval("SELECT state FROM qlsched.runs WHERE run_id = $1", run_id)
        if state in ("succeeded", "failed", "cancelled"):
            return
        await su.execute(EXPIRE_SQL, run_id)
        await su.execute("UPDATE qlsched.runs SET retry_at_ms = 0 WHERE run_id = $1", run_id)
        await d.refresh()
        await d.reap()
        await d.claim()
        for c in d.claimed:
            beat = await worker.heartbeat(
                d.db, attempt_id=c.attempt_id, lease_token=c.lease_token, lease_ms=LEASE_MS
            )
            cancel = isinstance(beat, Extended) and beat.cancel_requested
            result = JobResult(end="cancelled", code="cancelled") if cancel else OK
            await worker.finish(
                d.db, attempt_id=c.attempt_id, lease_token=c.lease_token, result=result
            )


async def _oracle(su: Raw, run_id: str, a: WorkerSession, cancel: Canceller) -> list[str]:
    [run] = await su.fetch("SELECT * FROM qlsched.runs WHERE run_id = $1", run_id)
    events = await su.fetch(
        "SELECT seq, type FROM qlsched.run_events WHERE run_id = $1 ORDER BY seq", run_id
    )
    attempts = await su.fetch(
        "SELECT * FROM qlsched.attempts WHERE run_id = $1 ORDER BY attempt_no", run_id
    )
    out: list[str] = []
    if run["state"] not in ("succeeded", "failed", "cancelled"):
        out.append(f"Run left {run['state']}")
    types = [e["type"] for e in events]
    ends = [t for t in types if t in TERMINAL]
    if len(ends) != 1 or types[-1] != ends[0] or ends[0] != f"run.{run['state']}":
        out.append(f"terminal events {types} for a {run['state']} Run")
    if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
        out.append(f"event numbers {[e['seq'] for e in events]}")
    if [x["attempt_no"] for x in attempts] != list(range(1, len(attempts) + 1)):
        out.append("attempt numbers not 1..k")
    if len(attempts) > 2:
        out.append(f"{len(attempts)} attempts, max_attempts 2")
    out += [
        f"attempt {x['attempt_no']} ended {x['state']} before a retry"
        for x in attempts[:-1]
        if x["state"] not in ("lost", "failed")
    ]
    last = attempts[-1]["state"]
    expected = {
        "succeeded": ("succeeded",),
        "failed": ("failed", "lost"),
        "cancelled": ("cancelled", "lost", "failed"),
    }
    if last not in expected.get(run["state"], ()):
        out.append(f"last attempt {last} under a {run['state']} Run")
    by_id = {str(x["attempt_id"]): x for x in attempts}
    for c, o in zip(
        a.claimed, [o for o in a.outcomes if not isinstance(o, Extended)], strict=False
    ):
        mine = by_id[c.attempt_id]["state"]
        if isinstance(o, Finished) and mine != "succeeded":
            out.append(f"A's finish accepted but its attempt is {mine}")
        if not isinstance(o, Finished) and mine == "succeeded":
            out.append("A's attempt succeeded though its finish was refused")
    if isinstance(cancel.outcome, CancelledQueued):
        ran = [x["attempt_no"] for x in attempts if x["started_at_ms"] is not None]
        if ran or run["state"] != "cancelled":
            out.append(f"cancelled while queued, yet attempts {ran} ran, Run {run['state']}")
    return out


PROGRAM_SIZES = {"expiry": 3, "cancel": 2, "expiry_cancel": 3}


@pytest.mark.parametrize("actor", list(PROGRAM_SIZES))
async def test_every_ordering_of_an_attempt(pg_db: TestDatabase, actor: str) -> None:
    """Every interleaving of claim, heartbeat and finish with `actor` ends with the Run
    terminal under exactly one terminal event, contiguous event numbers, attempts within the
    policy, a finish accepted only under a live lease, and a queued cancel that no worker
    ran; no step raises."""
    failures: list[str] = []
    explored = waits = reordered = 0
    sizes = [3, PROGRAM_SIZES[actor]]
    async with _world(pg_db) as world:
        watch = await world.connect(pg_db.superuser_dsn)
        su = await world.connect(pg_db.superuser_dsn)
        x_su = await world.connect(pg_db.superuser_dsn)
        canceller = Canceller(await world.connect(pg_db.admin_dsn))
        admin = await world.connect(pg_db.admin_dsn)
        await admin.call(publish, admin.conn, FILE)
        a = await _worker(world, pg_db.worker_dsn, "worker-a")
        b = await _worker(world, pg_db.worker_dsn, "worker-b", ["w/t"])
        d = await _worker(world, pg_db.worker_dsn, "worker-d")
        engine = Engine(watch.conn, world.loop, gate_pid=-1)
        for order in orderings(sizes):
            run_id = str(uuid.uuid4())
            await su.execute(QUEUE_SQL, run_id)
            await a.refresh()
            await b.refresh()
            canceller.outcome = None

            async def expire(r: str = run_id) -> None:
                await x_su.execute(EXPIRE_SQL, r)

            program_a = [
                Step("A", "claim", a.claim),
                Step("A", "heartbeat", a.heartbeat),
                Step("A", "finish", a.finish),
            ]
            sessions = [Session("A", lambda: [a.pid])]
            if actor == "expiry":
                program_x = [
                    Step("X", "expire", expire),
                    Step("X", "reap", b.reap),
                    Step("X", "claim", b.claim),
                ]
                sessions.append(Session("X", lambda: [b.pid, x_su.pid]))
            elif actor == "cancel":
                program_x = [
                    Step("X", "cancel", lambda r=run_id: canceller.open(r)),
                    Step("X", "commit", canceller.commit),
                ]
                sessions.append(Session("X", lambda: [canceller.raw.pid]))
            else:
                program_x = [
                    Step("X", "expire", expire),
                    Step("X", "cancel", lambda r=run_id: canceller.once(r)),
                    Step("X", "reap", b.reap),
                ]
                sessions.append(Session("X", lambda: [b.pid, x_su.pid, canceller.raw.pid]))
            trace = await engine.run([program_a, program_x], sessions, order)
            explored += 1
            waits += bool(trace.waited)
            reordered += trace.effective != trace.planned
            await _drive(su, d, run_id)
            problems = [f"{s} raised {e!r}" for s, e in trace.errors.items()]
            problems += await _oracle(su, run_id, a, canceller)
            if problems:
                failures.append(f"{actor} [{' '.join(trace.effective)}]: " + "; ".join(problems))
    TALLY.explorations += 1
    TALLY.orderings += explored
    TALLY.waits += waits
    TALLY.reordered += reordered
    TALLY.failed += len(failures)
    TALLY.lines.extend(failures)
    assert explored == count_orderings(sizes)
    assert not failures, "\n".join(failures)
