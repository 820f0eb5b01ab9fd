"""Every ordering of a request round (claim, admit) against a concurrent actor.

The request round is a replica's requests pass cut into its two statements: ``A.claim``
(the request claim, committed at once) and ``A.admit`` (one chunk, one SERIALIZABLE
statement). The actors:

* ``takeover``: a second replica expires A's lease (superuser), claims the request and
  admits it: the first admit to reach the row under a live fence wins, the other is
  fenced out;
* ``spec``: a publish of a changed cron (written in an open transaction, then committed):
  the request, made for the old revision, runs under it or is refused, never both and never
  under the new one;
* ``cron``: a cron replica claims and admits the trigger's due cursor while A backfills a
  range that holds it: the occurrence gets one Run (cron's or the backfill's, counted as
  already admitted by the other), and the backfill never admits at or past the cursor its
  claim saw.

After each ordering the request is driven to its end (leases expired, fresh passes), then
the oracle checks: every key of the request has at most one Run, a done request has all of
them, a refused one none of its own, every Run names the revision the request was made for,
and the request's counts add up. The engine (``tests.interleave.engine``) runs each step
until it is done or waits on a lock, by asking the server.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio_asyncio

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.core.config import Config
from qlsched.core.keys import idempotency_key, manual_key
from qlsched.core.requests import Recorded, RequestChunk, RequestClaim
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.pool import Database, open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.requests import PostgresRequestStore, record_backfill, record_trigger_now
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS
from tests.integration.adapter_support import decision_for
from tests.interleave.engine import Engine, Session, Step, count_orderings, orderings
from tests.interleave.world import Publisher, Raw, Replica, World
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

MINUTE_MS = 60_000
LEASE_MS = 30_000
EXPIRE_SQL = (
    "UPDATE qlsched.control_requests SET claim_expires_at_ms ="
    " (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint - 1"
    " WHERE project_id = $1 AND claim_token IS NOT NULL"
)
NOW_SQL = "SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint"


def _file(project: str, cron: str = "* * * * *") -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id=project)],
        tasks=[TaskEntry(project=project, id="t", command="true")],
        triggers=[
            TriggerEntry(
                project=project, id=f"{project}x", task="t", cron=cron, misfire="fire_once"
            )
        ],
    )


@dataclasses.dataclass
class RequestReplica:
    """A requests pass over one claim and one admit connection, cut into its statements."""

    owner: str
    store: PostgresRequestStore
    claim_db: Database
    admit_db: Database
    pids: list[int] = dataclasses.field(default_factory=list)
    claims: list[RequestClaim] = dataclasses.field(default_factory=list)
    outcomes: list[Any] = dataclasses.field(default_factory=list)

    def maker(self) -> RequestsPass:
        config = Config(owner=self.owner)
        return RequestsPass(self.store, config, MemorySink(), Metrics(), budget=16, poll_s=0.0)

    async def refresh(self) -> None:
        self.claims, self.outcomes = [], []

        async def pid(conn: Any) -> int:
            return int(await conn.fetchval("SELECT pg_catalog.pg_backend_pid()"))

        self.pids = [await self.claim_db.run(pid), await self.admit_db.run(pid)]

    async def claim(self) -> None:
        self.claims = (await self.store.claim(self.owner, 16, LEASE_MS)).claims

    async def admit(self) -> None:
        maker = self.maker()
        for c in self.claims:
            chunk: RequestChunk | None = maker.chunk_for(c)
            assert chunk is not None
            self.outcomes.append(await self.store.admit(chunk))


@contextlib.asynccontextmanager
async def _world(db: TestDatabase) -> AsyncIterator[World]:
    async with trio_asyncio.open_loop() as loop, contextlib.AsyncExitStack() as stack:
        yield World(loop, stack, db.superuser_dsn, db.admin_dsn, db.runtime_dsn)


async def _request_replica(world: World, owner: str) -> RequestReplica:
    claim_db = await world.stack.enter_async_context(
        open_database(world.runtime_dsn, max_size=1, settings=CLAIM_SETTINGS)
    )
    admit_db = await world.stack.enter_async_context(
        open_database(
            world.runtime_dsn, isolation="serializable", max_size=1, settings=ADMIT_SETTINGS
        )
    )
    return RequestReplica(owner, PostgresRequestStore(claim_db, admit_db), claim_db, admit_db)


async def _cron_settle(k: Replica) -> None:
    """The cron replica's round after its claim: the Fire of its due cursor, admitted."""
    from qlsched.core.keys import fire_request
    from qlsched.core.outcomes import Fire

    fires = []
    for c in k.claims:
        decision = decision_for(c)
        assert isinstance(decision, Fire), decision
        fires.append(fire_request(c, decision))
    k.outcomes.extend(await k.store.admit(fires))


@pytest.mark.parametrize("actor", ["takeover", "spec", "cron"])
async def test_every_ordering_of_a_request_round(pg_db: TestDatabase, actor: str) -> None:
    """Every interleaving of a request round with ``actor`` keeps each of the request's
    keys to at most one Run, ends with the request done (all its keys have a Run) or
    refused (none of its own), every Run under the requested revision, and counts that add
    up; no step raises."""
    failures: list[str] = []
    explored = 0
    async with _world(pg_db) as world:
        watch = await world.connect(pg_db.superuser_dsn)
        su = await world.connect(pg_db.superuser_dsn)
        admin = await world.connect(pg_db.admin_dsn)
        a = await _request_replica(world, "replica-a")
        c = await _request_replica(world, "replica-c")
        c_su = await world.connect(pg_db.superuser_dsn)
        publisher = Publisher(await world.connect(pg_db.admin_dsn))
        k = await world.replica("replica-k", gated=False)
        engine = Engine(watch.conn, world.loop, gate_pid=-1)
        sizes = [2, {"takeover": 3, "spec": 2, "cron": 2}[actor]]
        for n, order in enumerate(orderings(sizes)):
            project = f"q{actor[0]}{n}"
            trigger = f"{project}x"
            await admin.call(publish, admin.conn, _file(project))
            now = int(await su.fetchval(NOW_SQL))
            start = (now // MINUTE_MS - 20) * MINUTE_MS
            keys: list[str]
            if actor == "cron":
                await su.execute(
                    "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $2"
                    " WHERE project_id = $1",
                    project,
                    start + 5 * MINUTE_MS,
                )
                recorded = await admin.call(
                    record_backfill,
                    admin.conn,
                    project,
                    trigger,
                    from_ms=start,
                    to_ms=start + 9 * MINUTE_MS,
                    max_occurrences=100,
                )
                assert isinstance(recorded, Recorded)
                keys = [
                    idempotency_key(trigger, recorded.trigger_revision, start + i * MINUTE_MS)
                    for i in range(10)
                ]
            else:
                recorded = await admin.call(record_trigger_now, admin.conn, project, trigger)
                assert isinstance(recorded, Recorded)
                keys = [manual_key(trigger, recorded.trigger_revision, recorded.request_id)]
            for r in (a, c, k):
                await r.refresh()
            sessions = [Session("A", lambda: a.pids)]
            program_a = [Step("A", "claim", a.claim), Step("A", "admit", a.admit)]
            if actor == "takeover":

                async def expire(p: str = project) -> None:
                    await c_su.execute(EXPIRE_SQL, p)

                program_b = [
                    Step("C", "expire", expire),
                    Step("C", "claim", c.claim),
                    Step("C", "admit", c.admit),
                ]
                sessions.append(Session("C", lambda: [*c.pids, c_su.pid]))
            elif actor == "spec":

                async def write(p: str = project) -> None:
                    await publisher.write(_file(p, cron="*/2 * * * *"))

                async def commit() -> None:
                    if publisher._tx is not None:
                        await publisher.raw.call(publisher._tx.commit)
                        publisher._tx = None

                program_b = [Step("P", "write", write), Step("P", "commit", commit)]
                sessions.append(Session("P", lambda: [publisher.raw.pid]))
            else:
                program_b = [
                    Step("K", "claim", k.claim),
                    Step("K", "settle", lambda: _cron_settle(k)),
                ]
                sessions.append(Session("K", lambda: k.pids))
            trace = await engine.run([program_a, program_b], sessions, order)
            # Drive the request to its end: expired leases, fresh passes.
            for _ in range(5):
                await su.execute(EXPIRE_SQL, project)
                await a.claim()
                if not a.claims:
                    break
                await a.admit()
            problems = [f"{s} raised {e!r}" for s, e in trace.errors.items()]
            problems += await _oracle(su, project, recorded, keys, actor)
            if actor == "cron" and [type(o).__name__ for o in k.outcomes] != ["Admitted"]:
                # Cron must never find its cursor's key taken by the backfill.
                problems.append(f"cron's own admit: {k.outcomes}")
            explored += 1
            if problems:
                failures.append(f"{actor} [{' '.join(trace.effective)}]: " + "; ".join(problems))
            await su.execute(
                "UPDATE qlsched.trigger_schedules SET active = false WHERE project_id = $1",
                project,
            )
    assert explored == count_orderings(sizes)
    assert not failures, "\n".join(failures)


async def _oracle(
    su: Raw, project: str, recorded: Recorded, keys: list[str], actor: str
) -> list[str]:
    [req] = await su.fetch(
        "SELECT * FROM qlsched.control_requests WHERE request_id = $1", recorded.request_id
    )
    runs = await su.fetch(
        "SELECT idempotency_key, trigger_revision, admitted_by_owner FROM qlsched.runs"
        " WHERE project_id = $1",
        project,
    )
    by_key: dict[str, int] = {}
    for r in runs:
        by_key[r["idempotency_key"]] = by_key.get(r["idempotency_key"], 0) + 1
    out = [f"{key}: {n} Runs" for key, n in by_key.items() if n > 1]
    out += [
        f"a Run under revision {r['trigger_revision']}"
        for r in runs
        if r["trigger_revision"] != recorded.trigger_revision
    ]
    mine = [r for r in runs if r["admitted_by_owner"] != "replica-k"]
    if req["state"] == "done":
        out += [f"{key}: no Run" for key in keys if key not in by_key]
        total = len(keys)
        if req["admitted"] + req["already_admitted"] != total:
            out.append(f"counts {req['admitted']}+{req['already_admitted']} != {total}")
        if req["admitted"] != len(mine):
            out.append(f"admitted {req['admitted']} but {len(mine)} Runs by the request")
    elif req["state"] == "refused":
        if actor == "cron":
            out.append(f"a backfill refused ({req['refused_reason']})")
        if mine:
            out.append(f"refused ({req['refused_reason']}) with {len(mine)} Runs of its own")
    else:
        out.append(f"left {req['state']}")
    return out
