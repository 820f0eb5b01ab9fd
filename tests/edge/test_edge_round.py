"""One Edge round end to end on a file, with a fixed clock: decisions are core's (the same
``decide``, the same idempotency key), ``skipped_total`` and ``coalesced_total`` are counted
as core counts them, a refused write does not stop the round's others, and the HTTP
endpoint serves health, readiness and metrics without hypercorn."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest
import trio

from qlsched.core.cron import parse_cron
from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.fence import FireRequest
from qlsched.core.keys import fire_request, idempotency_key
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    DigestInvalid,
    Fire,
    Skip,
    StoreFailed,
)
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.edge.http import open_http_listeners, serve_http
from qlsched.edge.scheduler import EdgeScheduler, EdgeSettings
from qlsched.metrics import Metrics
from qlsched.sqlite.database import EdgeDatabase
from qlsched.sqlite.publish import publish
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import AUDIT_BAD_RUNS, clocked_edge, read
from tests.support.memory_sink import MemorySink

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
MINUTE = 60_000


def spec_file(*triggers: TriggerEntry) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command="true")],
        triggers=list(triggers),
    )


def trigger(trigger_id: str, misfire: str, cron: str = "* * * * *") -> TriggerEntry:
    return TriggerEntry(
        project="p",
        id=trigger_id,
        task="job",
        cron=cron,
        misfire=misfire,  # type: ignore[arg-type]
    )


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[EdgeDatabase, list[int]]]:
    async with clocked_edge(tmp_path, T0) as opened:
        yield opened


async def test_round_counts_as_core_decides(
    edge: tuple[EdgeDatabase, list[int]], tmp_path: Path
) -> None:
    """After 10.5 late minutes, a ``skip`` trigger adds core's ``Skip.skipped`` to
    ``skipped_total`` and writes no Run; a ``fire_once`` trigger writes one Run for its
    cursor under core's key and adds core's ``Fire.coalesced`` to ``coalesced_total``."""
    db, now = edge
    entries = (trigger("late-skip", "skip"), trigger("late-once", "fire_once"))
    await db.call(lambda conn: publish(conn, spec_file(*entries), now[0]))
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink())
    await scheduler.run_round()  # initialize both cursors
    cursor = read(Path(db.path), "SELECT DISTINCT next_fire_at_ms FROM trigger_schedules")
    [(c,)] = cursor
    assert isinstance(c, int)
    now[0] = c + 10 * MINUTE + 30_000
    spec = TriggerSpec(cron=parse_cron("* * * * *"), misfire_policy="skip")
    skip = decide(spec, c, now[0])
    fire = decide(TriggerSpec(cron=spec.cron, misfire_policy="fire_once"), c, now[0])
    assert isinstance(skip, Skip)
    assert isinstance(fire, Fire)

    stats = await scheduler.run_round()

    assert (stats.claimed, stats.written, stats.admitted) == (2, 2, 1)
    rows = {
        r[0]: r[1:]
        for r in read(
            Path(db.path),
            "SELECT trigger_id, next_fire_at_ms, skipped_total, coalesced_total,"
            " last_scheduled_at_ms FROM trigger_schedules",
        )
    }
    assert rows["late-skip"] == (skip.next_ms, skip.skipped, 0, None)
    assert rows["late-once"] == (fire.next_ms, 0, fire.coalesced, c)
    assert read(
        Path(db.path), "SELECT trigger_id, scheduled_for_ms, idempotency_key FROM runs"
    ) == [("late-once", c, idempotency_key("late-once", 1, c))]
    assert read(Path(db.path), AUDIT_BAD_RUNS) == []
    assert scheduler.metrics.summary_counts()["skipped"] == skip.skipped


async def test_a_refused_write_leaves_the_rest_of_the_round(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """A row whose revision moved between the round's read and its write is refused by the
    compare-and-set alone; the round's other Fires commit."""
    db, now = edge
    entries = [trigger(f"t{i}", "skip") for i in range(3)]
    await db.call(lambda conn: publish(conn, spec_file(*entries), now[0]))
    store = SqliteStore(db)
    scheduler = EdgeScheduler(store, EdgeSettings(), MemorySink())
    await scheduler.run_round()
    now[0] += MINUTE
    claims = await store.claim("edge", 10, 30_000)
    moved = [*entries[:1], trigger("t1", "skip", cron="*/5 * * * *"), *entries[2:]]
    await db.call(lambda conn: publish(conn, spec_file(*moved), now[0]))
    fires = []
    for claim in claims:
        decision = decide(
            TriggerSpec(cron=parse_cron(claim.cron)), claim.cursor_ms, claim.claimed_at_ms
        )
        assert isinstance(decision, Fire)
        fires.append(fire_request(claim, decision))

    outcomes = await store.commit(fires)

    assert [type(o).__name__ for o in outcomes] == ["Admitted", "RevisionChanged", "Admitted"]
    assert sorted(r[0] for r in read(Path(db.path), "SELECT trigger_id FROM runs")) == ["t0", "t2"]


async def get(address: tuple[str, int], path: str) -> tuple[int, str]:
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


BACKLOG = 'qlsched_due_backlog{{profile="edge"}} {}.0'
"""The Edge's due backlog line in ``/metrics`` (``.format(rows)``)."""


async def scrape_until(address: tuple[str, int], text: str, timeout_s: float = 10) -> str:
    """``/metrics`` once it contains ``text`` (polled every 100 ms); fail after the timeout."""
    with trio.fail_after(timeout_s):
        while True:
            body = (await get(address, "/metrics"))[1]
            if text in body:
                return body
            await trio.sleep(0.1)


async def test_http_health_readiness_metrics(edge: tuple[EdgeDatabase, list[int]]) -> None:
    """/healthz is 200; /readyz is 503 until rounds run and 200 while they do; /metrics has
    the cluster's outcome counters and backlog under the same names, each series marked
    ``profile="edge"`` (and the target too); other paths are 404."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec_file(trigger("t", "skip")), now[0]))
    metrics = Metrics(profile="edge")
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink(), metrics)
    listeners = await open_http_listeners("127.0.0.1", 0)
    address = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_http, scheduler, metrics, listeners)
        assert await get(address, "/healthz") == (200, "ok\n")
        assert (await get(address, "/readyz"))[0] == 503
        assert BACKLOG.format(1) in (await get(address, "/metrics"))[1]
        await scheduler.run_round()
        stop = trio.Event()
        async with trio.open_nursery() as rounds:
            await rounds.start(scheduler.run, stop)
            assert (await get(address, "/readyz"))[0] == 200
            stop.set()
        assert (await get(address, "/readyz"))[0] == 503
        # The backlog is read at most once a second (a scrape flood reads the file once):
        # wait for the scrape that reads it again.
        metrics = await scrape_until(address, BACKLOG.format(0))
        # The cluster's families and names; the profile is a label of each series.
        assert 'qlsched_outcomes_total{code="initialized",profile="edge"} 1.0' in metrics
        assert 'target_info{profile="edge"} 1.0' in metrics
        assert "qlsched_edge_" not in metrics
        # The backlog is read again once the last reading is METRICS_TTL_S old.
        with trio.fail_after(10):
            while True:
                if BACKLOG.format(0) in (await get(address, "/metrics"))[1]:
                    break
                await trio.sleep(0.05)
        assert (await get(address, "/nope"))[0] == 404
        nursery.cancel_scope.cancel()


async def test_v1_schedules_pages_by_key(edge: tuple[EdgeDatabase, list[int]]) -> None:
    """``/v1/schedules`` is the cluster's: the rows as JSON in key order, a full page with
    ``next_cursor`` whose ``?cursor=`` gives the next page, every row seen once; a bad limit
    or cursor is 400."""
    db, now = edge
    ids = [f"t{i}" for i in range(5)]
    await db.call(lambda conn: publish(conn, spec_file(*(trigger(t, "skip") for t in ids)), now[0]))
    metrics = Metrics(profile="edge")
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink(), metrics)
    listeners = await open_http_listeners("127.0.0.1", 0)
    address = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_http, scheduler, metrics, listeners)
        seen: list[str] = []
        path = "/v1/schedules?limit=2"
        while True:
            status, body = await get(address, path)
            assert status == 200, body
            page = json.loads(body)
            seen += [s["trigger_id"] for s in page["schedules"]]
            assert all(s["claim_owner"] is None for s in page["schedules"])
            if page["next_cursor"] is None:
                break
            path = f"/v1/schedules?limit=2&cursor={page['next_cursor']}"
        assert seen == ids
        assert (await get(address, "/v1/schedules?limit=0"))[0] == 400
        assert (await get(address, "/v1/schedules?cursor=nope"))[0] == 400
        nursery.cancel_scope.cancel()


async def due_fires(store: SqliteStore, limit: int = 10) -> list[FireRequest]:
    fires = []
    for claim in await store.claim("edge", limit, 30_000):
        decision = decide(
            TriggerSpec(cron=parse_cron(claim.cron)), claim.cursor_ms, claim.claimed_at_ms
        )
        assert isinstance(decision, Fire)
        fires.append(fire_request(claim, decision))
    return fires


async def _one_admitted(db: EdgeDatabase, now: list[int], store: SqliteStore) -> Admitted:
    """Three triggers initialised, a minute on, and t1's Fire alone admitted."""
    entries = [trigger(f"t{i}", "skip") for i in range(3)]
    await db.call(lambda conn: publish(conn, spec_file(*entries), now[0]))
    await EdgeScheduler(store, EdgeSettings(), MemorySink()).run_round()
    now[0] += MINUTE
    [first] = await store.commit([f for f in await due_fires(store) if f.claim.trigger_id == "t1"])
    assert isinstance(first, Admitted)
    return first


async def test_a_constraint_failure_leaves_out_that_row_alone(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """When one row of a batch fails a constraint (its Fire carries the Run id of another
    Fire of the batch), that row alone is refused as StoreFailed with its cursor untouched,
    and the round's other Runs commit."""
    db, now = edge
    entries = [trigger(f"t{i}", "skip") for i in range(3)]
    await db.call(lambda conn: publish(conn, spec_file(*entries), now[0]))
    store = SqliteStore(db)
    await EdgeScheduler(store, EdgeSettings(), MemorySink()).run_round()
    now[0] += MINUTE
    fires = await due_fires(store)
    fires[1] = msgspec.structs.replace(fires[1], run_id=fires[0].run_id)
    cursor = fires[1].claim.cursor_ms

    outcomes = await store.commit(fires)

    assert [type(o).__name__ for o in outcomes] == ["Admitted", "StoreFailed", "Admitted"]
    assert isinstance(outcomes[1], StoreFailed)
    assert outcomes[1].sqlstate == "SQLITE_CONSTRAINT_PRIMARYKEY"
    path = Path(db.path)
    assert read(path, "SELECT trigger_id, count(*) FROM runs GROUP BY 1") == [("t0", 1), ("t2", 1)]
    assert read(path, "SELECT next_fire_at_ms FROM trigger_schedules WHERE trigger_id = 't1'") == [
        (cursor,)
    ]
    assert read(path, AUDIT_BAD_RUNS) == []


async def test_a_key_taken_moves_the_cursor_past_it(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """A Fire whose key already has a Run (the cursor moved back onto it, as a backfill
    taking the occurrence first would leave it) is never a retry loop: the cursor moves
    past it, the row counts it in ``already_admitted_total``, no second Run, Attempt or
    event is written, and the round's other Runs commit."""
    db, now = edge
    store = SqliteStore(db)
    first = await _one_admitted(db, now, store)

    def move_back(conn: sqlite3.Connection) -> None:
        conn.execute(
            "UPDATE trigger_schedules SET next_fire_at_ms = ?1, due_at_ms = ?1"
            " WHERE trigger_id = 't1'",
            (first.scheduled_for_ms,),
        )

    await db.call(move_back)

    outcomes = await store.commit(await due_fires(store))

    assert [type(o) for o in outcomes] == [Admitted, AlreadyAdmitted, Admitted]
    assert outcomes[1].idempotency_key == first.idempotency_key  # type: ignore[union-attr]
    path = Path(db.path)
    assert read(path, "SELECT trigger_id, count(*) FROM runs GROUP BY 1") == [
        ("t0", 1),
        ("t1", 1),
        ("t2", 1),
    ]
    assert read(
        path,
        "SELECT next_fire_at_ms, already_admitted_total FROM trigger_schedules"
        " WHERE trigger_id = 't1'",
    ) == [(first.scheduled_for_ms + MINUTE, 1)]
    assert read(path, AUDIT_BAD_RUNS) == []
    assert read(path, "SELECT count(*) FROM attempts") == [(3,)]
    now[0] += MINUTE
    assert [type(o) for o in await store.commit(await due_fires(store))] == [Admitted] * 3


async def test_a_corrupt_execution_revision_admits_nothing(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """Fail closed: an execution revision whose payload no longer matches its digest (or
    whose executor is not remote_worker) admits no Run and leaves the cursor as it was."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec_file(trigger("t", "skip")), now[0]))
    store = SqliteStore(db)
    await EdgeScheduler(store, EdgeSettings(), MemorySink()).run_round()
    now[0] += MINUTE
    path = Path(db.path)
    before = read(path, "SELECT * FROM trigger_schedules")

    def corrupt(sql: str) -> Callable[[sqlite3.Connection], None]:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(sql)

        return run

    await db.call(corrupt("UPDATE execution_revisions SET payload = payload || ' '"))
    [payload] = await store.commit(await due_fires(store))
    await db.call(corrupt("UPDATE execution_revisions SET payload = rtrim(payload)"))
    await db.call(corrupt("UPDATE execution_revisions SET executor_kind = 'shell'"))
    [executor] = await store.commit(await due_fires(store))

    assert payload == DigestInvalid("p", "t", part="execution")
    assert executor == DigestInvalid("p", "t", part="executor")
    assert read(path, "SELECT count(*) FROM runs") == [(0,)]
    assert read(path, "SELECT * FROM trigger_schedules") == before
