"""Every ordering of a request round against schedule control and cron's own first steps.

The request round is a replica's requests pass cut into its two statements (``A.claim``,
``A.admit``, as in ``test_requests_explorer``); the other program is one of:

* ``init``: a cron replica claims an uninitialised row and writes its Initialize while A
  backfills the last minutes (a NULL cursor is not "before now": the backfill waits);
* ``pause``: a ``pause`` written in an open transaction, then committed, while A admits a
  trigger-now request (nothing of a paused trigger is admitted once the pause committed);
* ``resume``: a trigger paused before its first claim holds a backfill of the pause; a
  ``resume --catch-up fire_once`` (written, then committed) puts the cursor on the latest
  occurrence inside the pause, while A claims and admits (the catch-up stays cron's);
* ``resume_cron``: as ``resume``, with cron's claim and admit of the catch-up racing A.

After each ordering the world is driven to its end (resumed, leases expired, fresh passes
and cron rounds), then the oracle checks the class each finding belonged to: no SQLSTATE
23505 reaches any round, no key has two Runs, cron never finds its cursor's key taken, no
Run of a paused trigger is admitted after the pause committed, and the request ends done.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import trio_asyncio

from qlsched.core.control import TriggerRef
from qlsched.core.keys import idempotency_key
from qlsched.core.outcomes import AlreadyAdmitted, StoreFailed
from qlsched.core.requests import Recorded, RequestFailed
from qlsched.postgres.control import pause, resume
from qlsched.postgres.publish import publish
from qlsched.postgres.requests import record_backfill, record_trigger_now
from tests.interleave.engine import Engine, Session, Step, count_orderings, orderings
from tests.interleave.test_requests_explorer import (
    EXPIRE_SQL,
    MINUTE_MS,
    NOW_SQL,
    _file,
    _request_replica,
)
from tests.interleave.world import Raw, Replica, World
from tests.support.pg import TestDatabase

ACTORS = ("init", "pause", "resume", "resume_cron")
BACKDATE_SQL = (
    "WITH s AS (UPDATE qlsched.trigger_schedules SET paused_at_ms = paused_at_ms - $2"
    " WHERE project_id = $1 RETURNING 1)"
    " UPDATE qlsched.triggers SET updated_at_ms = updated_at_ms - $2 WHERE project_id = $1"
)
EXPIRE_CRON_SQL = (
    "UPDATE qlsched.trigger_schedules SET claim_expires_at_ms ="
    " (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint - 1"
    " WHERE project_id = $1 AND claim_token IS NOT NULL"
)


class Controller:
    """``pause`` or ``resume`` as the admin, inside a transaction a later step commits."""

    def __init__(self, raw: Raw, su: Raw) -> None:
        self.raw = raw
        self.su = su
        self._tx: Any = None
        self.runs_at_commit: int | None = None

    async def write(self, kind: str, ref: TriggerRef) -> None:
        self._tx = self.raw.conn.transaction()
        await self.raw.call(self._tx.start)
        if kind == "pause":
            await self.raw.call(pause, self.raw.conn, ref, note=None, actor=None)
        else:
            await self.raw.call(resume, self.raw.conn, ref, catch_up="fire_once", actor=None)

    async def commit(self, project: str) -> None:
        assert self._tx is not None
        await self.raw.call(self._tx.commit)
        self._tx = None
        sql = "SELECT count(*) FROM qlsched.runs WHERE project_id = $1"
        n = await self.su.fetchval(sql, project)
        self.runs_at_commit = int(n)


@contextlib.asynccontextmanager
async def _world(db: TestDatabase) -> AsyncIterator[World]:
    async with trio_asyncio.open_loop() as loop, contextlib.AsyncExitStack() as stack:
        yield World(loop, stack, db.superuser_dsn, db.admin_dsn, db.runtime_dsn)


async def _cron_round(k: Replica) -> None:
    await k.claim()
    await k.decide()
    await k.settle()


@pytest.mark.parametrize("actor", ACTORS)
async def test_every_ordering_of_a_request_round_against_control(
    pg_db: TestDatabase, actor: str
) -> None:
    """Every interleaving of a request round with ``actor`` keeps each key to at most one
    Run, never lets 23505 reach a round, never leaves cron's cursor on a taken key, admits
    nothing of a paused trigger after its pause committed, and ends with the request done."""
    failures: list[str] = []
    explored = 0
    async with _world(pg_db) as world:
        watch = await world.connect(pg_db.superuser_dsn)
        su = await world.connect(pg_db.superuser_dsn)
        admin = await world.connect(pg_db.admin_dsn)
        a = await _request_replica(world, "replica-a")
        k = await world.replica("replica-k", gated=False)
        control = Controller(await world.connect(pg_db.admin_dsn), su)
        engine = Engine(watch.conn, world.loop, gate_pid=-1)
        sizes = [2, 2]
        for n, order in enumerate(orderings(sizes)):
            project = f"c{actor[0]}{actor[-1]}{n}"
            trigger = f"{project}x"
            ref = TriggerRef(project, trigger)
            await admin.call(publish, admin.conn, _file(project))
            now = int(await su.fetchval(NOW_SQL))
            start = (now // MINUTE_MS - 5) * MINUTE_MS  # one chunk holds the whole range
            control.runs_at_commit = None
            await a.refresh()
            await k.refresh()
            cron_outcomes: list[Any] = []
            if actor == "pause":
                recorded = await admin.call(record_trigger_now, admin.conn, project, trigger)
            else:
                if actor == "init":
                    # An Initialize decided two minutes ago and not written yet: its
                    # cursor lies inside the backfill's range.
                    await k.claim()
                    k.claims = [
                        msgspec.structs.replace(c, claimed_at_ms=c.claimed_at_ms - 2 * MINUTE_MS)
                        for c in k.claims
                    ]
                else:
                    # Paused before its first claim, ten minutes ago (backdated rather than
                    # waited for): the resume's catch-up lies inside the backfill's range.
                    await admin.call(pause, admin.conn, ref, note=None, actor=None)
                    await su.execute(BACKDATE_SQL, project, 10 * MINUTE_MS)
                span = (start, now)
                recorded = await admin.call(
                    record_backfill,
                    admin.conn,
                    project,
                    trigger,
                    from_ms=span[0],
                    to_ms=span[1],
                    max_occurrences=100,
                )
            assert isinstance(recorded, Recorded)
            sessions = [Session("A", lambda: a.pids)]
            program_a = [Step("A", "claim", a.claim), Step("A", "admit", a.admit)]
            if actor == "init":
                program_b = [Step("K", "decide", k.decide), Step("K", "settle", k.settle)]
                sessions.append(Session("K", lambda: k.pids))
            elif actor == "resume_cron":

                async def resume_now(r: TriggerRef = ref) -> None:
                    await control.write("resume", r)
                    await control.commit(r.project_id)

                program_b = [Step("C", "resume", resume_now), Step("K", "round", _settle(k, True))]
                sessions.append(Session("C", lambda: [control.raw.pid]))
                sessions.append(Session("K", lambda: k.pids))
            else:
                kind = "pause" if actor == "pause" else "resume"

                async def write(kd: str = kind, r: TriggerRef = ref) -> None:
                    await control.write(kd, r)

                async def commit(p: str = project) -> None:
                    await control.commit(p)

                program_b = [Step("C", "write", write), Step("C", "commit", commit)]
                sessions.append(Session("C", lambda: [control.raw.pid]))
            trace = await engine.run([program_a, program_b], sessions, order)
            cron_outcomes += k.outcomes
            problems = [f"{s} raised {e!r}" for s, e in trace.errors.items()]
            if actor == "pause":
                runs = int(
                    await su.fetchval(
                        "SELECT count(*) FROM qlsched.runs WHERE project_id = $1", project
                    )
                )
                if control.runs_at_commit is not None and runs != control.runs_at_commit:
                    problems.append(
                        f"{runs - control.runs_at_commit} Run(s) admitted after the pause"
                    )
                await admin.call(resume, admin.conn, ref, catch_up="skip", actor=None)
            # Drive to the end: the cursor initialised, cron's catch-up fired, the request
            # passed until done.
            for _ in range(6):
                await su.execute(EXPIRE_SQL, project)
                await su.execute(EXPIRE_CRON_SQL, project)
                await k.refresh()
                await _cron_round(k)
                cron_outcomes += k.outcomes
                await a.refresh()
                await a.claim()
                if a.claims:
                    await a.admit()
                    problems += _request_failures(a.outcomes)
            problems += _cron_failures(cron_outcomes)
            problems += await _oracle(su, project, trigger, recorded)
            explored += 1
            if problems:
                failures.append(f"{actor} [{' '.join(trace.effective)}]: " + "; ".join(problems))
            await su.execute(
                "UPDATE qlsched.trigger_schedules SET active = false WHERE project_id = $1",
                project,
            )
    assert explored == count_orderings(sizes)
    assert not failures, "\n".join(failures)


def _settle(k: Replica, claim_first: bool = False) -> Any:
    async def go() -> None:
        if claim_first:
            await k.claim()
        await k.decide()
        await k.settle()

    return go


def _cron_failures(outcomes: list[Any]) -> list[str]:
    out = [f"cron found its key taken: {o}" for o in outcomes if isinstance(o, AlreadyAdmitted)]
    out += [
        f"cron's admit failed {o.sqlstate}"
        for o in outcomes
        if isinstance(o, StoreFailed) and o.sqlstate == "23505"
    ]
    return out


def _request_failures(outcomes: list[Any]) -> list[str]:
    return [
        f"request admit failed {o.sqlstate}"
        for o in outcomes
        if isinstance(o, RequestFailed) and o.sqlstate == "23505"
    ]


async def _oracle(su: Raw, project: str, trigger: str, recorded: Recorded) -> list[str]:
    [req] = await su.fetch(
        "SELECT * FROM qlsched.control_requests WHERE request_id = $1", recorded.request_id
    )
    runs = await su.fetch(
        "SELECT idempotency_key, count(*)::int AS n FROM qlsched.runs WHERE project_id = $1"
        " GROUP BY 1",
        project,
    )
    out = [f"{r['idempotency_key']}: {r['n']} Runs" for r in runs if r["n"] > 1]
    [row] = await su.fetch(
        "SELECT next_fire_at_ms, trigger_revision FROM qlsched.trigger_schedules"
        " WHERE project_id = $1",
        project,
    )
    if row["next_fire_at_ms"] is not None:
        at_cursor = idempotency_key(trigger, row["trigger_revision"], row["next_fire_at_ms"])
        if at_cursor in {r["idempotency_key"] for r in runs}:
            out.append("the cron cursor sits on a key that already has a Run (a wedge)")
    if req["state"] != "done":
        out.append(f"request left {req['state']} ({req['refused_reason']})")
    return out
