"""Trigger-now and backfill requests under faults, with real ``qlsched run`` replicas.

The fault tools of the replica gates (``tests.support.faults``, ``tests.support.pgproxy``):
a replica reaches the server through the proxy, which sees each admit's Bind (a request
admit inserts Runs too) and can SIGKILL the replica before or after forwarding it, drop the
reply after the COMMIT, or hold it while the test terminates the backend
(``pg_terminate_backend``). The rule each test pins: every request's Runs exist exactly
once (one per key), whoever admitted them and however often the admit was tried; a
takeover happens only after the lease expired, under a higher claim version.

The trigger fires daily at midnight (UTC), so no cron admit runs during a test: every admit
the proxy sees is a request's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_asyncio

from qlsched.core.keys import idempotency_key, manual_key
from qlsched.core.requests import Recorded, RecordResult
from qlsched.core.specs import TriggerEntry
from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.pool import Connection, Database, connect_once
from qlsched.postgres.requests import record_backfill, record_trigger_now
from tests.support.faults import (
    PROJECT,
    GateDb,
    ReplicaProcess,
    create_gate_db,
    db_now_ms,
    fetch,
    open_su,
    poll,
    publish_triggers,
    report,
)
from tests.support.pgproxy import AdmitContext, PgProxy, unix_socket_path

TRIGGER = "d"
DAY_MS = 86_400_000
BACKFILL_DAYS = 40
FAST_CADENCE_MS = 100


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


@dataclasses.dataclass
class Gate:
    db: GateDb
    su: Database
    server: EmbeddedPostgres
    workdir: Path

    def replica(self, owner: str, *, dsn: str | None = None, **kwargs: Any) -> ReplicaProcess:
        return ReplicaProcess(owner, dsn or self.db.runtime_dsn, self.workdir, **kwargs)

    def proxy(self, hook: Any) -> PgProxy:
        return PgProxy(unix_socket_path(self.server.socket_dir, self.server.port), on_admit=hook)


@contextlib.asynccontextmanager
async def open_gate(server: EmbeddedPostgres, name: str, workdir: Path) -> AsyncIterator[Gate]:
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, name)
        await publish_triggers(
            db, [TriggerEntry(project=PROJECT, id=TRIGGER, task="job", cron="0 0 * * *")]
        )
        async with open_su(db.superuser_dsn) as su:
            yield Gate(db, su, server, workdir)


async def trigger_now(gate: Gate) -> Recorded:
    async def fn(conn: Connection) -> RecordResult:
        return await record_trigger_now(conn, PROJECT, TRIGGER, note="fault gate")

    result = await connect_once(gate.db.admin_dsn, fn)
    assert isinstance(result, Recorded), result
    return result


async def backfill(gate: Gate) -> tuple[Recorded, list[int]]:
    """A backfill of the last BACKFILL_DAYS midnights before yesterday's; their times."""
    end = (await db_now_ms(gate.su) // DAY_MS - 1) * DAY_MS
    days = [end - i * DAY_MS for i in reversed(range(BACKFILL_DAYS))]

    async def fn(conn: Connection) -> RecordResult:
        return await record_backfill(
            conn, PROJECT, TRIGGER, from_ms=days[0], to_ms=end, max_occurrences=BACKFILL_DAYS
        )

    result = await connect_once(gate.db.admin_dsn, fn)
    assert isinstance(result, Recorded), result
    assert result.total == BACKFILL_DAYS
    return result, days


async def request_row(gate: Gate, recorded: Recorded) -> dict[str, Any]:
    [row] = await fetch(
        gate.su, "SELECT * FROM qlsched.control_requests WHERE request_id = $1", recorded.request_id
    )
    return dict(row)


async def wait_done(gate: Gate, recorded: Recorded, timeout_s: float = 20) -> dict[str, Any]:
    async def done() -> bool:
        return (await request_row(gate, recorded))["state"] == "done"

    await poll(done, timeout_s=timeout_s, interval_s=0.05)
    return await request_row(gate, recorded)


async def runs_by_key(gate: Gate) -> dict[str, list[dict[str, Any]]]:
    rows = await fetch(
        gate.su,
        "SELECT r.idempotency_key, r.admitted_by_owner, r.admitted_claim_version,"
        " r.queued_at_ms,"
        " (SELECT count(*) FROM qlsched.attempts a WHERE a.run_id = r.run_id) AS attempts,"
        " (SELECT count(*) FROM qlsched.run_events e WHERE e.run_id = r.run_id) AS events"
        " FROM qlsched.runs r",
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["idempotency_key"], []).append(dict(r))
    return out


def request_keys(ctx: AdmitContext) -> list[str]:
    """The keys an admit Bind carries (manual or cron)."""
    for values in ctx.text_arrays():
        if values and all(v.startswith("ql3:") for v in values):
            return values
    return []


def assert_each_once(runs: dict[str, list[dict[str, Any]]], keys: list[str]) -> None:
    """Exactly the given keys, one Run each, each with one Attempt and two events."""
    assert sorted(runs) == sorted(keys)
    for key, rows in runs.items():
        assert [(r["attempts"], r["events"]) for r in rows] == [(1, 2)], key


@pytest.mark.parametrize("mode", ["unsent", "sent"])
async def test_trigger_now_is_admitted_once_when_the_replica_is_killed_mid_admit(
    server: EmbeddedPostgres, tmp_path: Path, mode: str
) -> None:
    """Rule: a replica SIGKILLed inside a trigger-now admit never makes it run twice.

    ``unsent``: killed before its admit reached the server; the request stays claimed until
    its lease expires by database time, then another replica takes it over (a higher claim
    version) and admits the one Run. ``sent``: killed with the admit delivered; it commits,
    and the other replica finds the request done and admits nothing.
    """
    seen: list[list[str]] = []
    async with open_gate(server, f"rq_kill_{mode}", tmp_path) as gate, trio.open_nursery() as n:
        victim: ReplicaProcess
        killed = trio.Event()

        async def kill_after_forward(ctx: AdmitContext) -> None:
            await ctx.forwarded.wait()
            victim.send(signal.SIGKILL)
            killed.set()

        async def hook(ctx: AdmitContext) -> None:
            seen.append(request_keys(ctx))
            if killed.is_set() or len(seen) > 1:
                return
            if mode == "unsent":
                victim.send(signal.SIGKILL)
                ctx.abort = True
                killed.set()
            else:
                n.start_soon(kill_after_forward, ctx)

        proxy = gate.proxy(hook)
        await n.start(proxy.serve)
        victim = gate.replica("r-victim", dsn=proxy.dsn(gate.db.name), cadence_ms=FAST_CADENCE_MS)
        other = gate.replica("r-other")
        try:
            await victim.start()
            recorded = await trigger_now(gate)
            with trio.fail_after(20):
                await killed.wait()
            assert victim.proc is not None
            with trio.fail_after(10):
                await victim.proc.wait()
            held = await request_row(gate, recorded)
            await other.start()
            row = await wait_done(gate, recorded)
        finally:
            await victim.stop()
            await other.stop()
        runs = await runs_by_key(gate)
        n.cancel_scope.cancel()
    key = manual_key(TRIGGER, recorded.trigger_revision, recorded.request_id)
    assert seen[0] == [key]
    assert_each_once(runs, [key])
    [run] = runs[key]
    if mode == "unsent":
        assert held["claim_owner"] == "r-victim"
        assert run["admitted_by_owner"] == "r-other"
        assert run["admitted_claim_version"] > held["claim_version"]
        assert run["queued_at_ms"] >= held["claim_expires_at_ms"]
    else:
        assert run["admitted_by_owner"] == "r-victim"
        assert row["claim_version"] == held["claim_version"]
    assert (row["admitted"], row["already_admitted"]) == (1, 0)
    report(f"trigger-now killed {mode}: 1 Run by {run['admitted_by_owner']}")


async def test_backfill_survives_a_kill_mid_chunk_and_a_takeover_after_expiry(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: a backfill's cursor survives a replica killed before its second chunk reached
    the server: after the lease expired another replica takes the request over and goes on
    from the first chunk's cursor; every occurrence of the range has exactly one Run and the
    request counts them all as admitted, none twice."""
    chunks: list[list[str]] = []
    async with open_gate(server, "rq_backfill_kill", tmp_path) as gate, trio.open_nursery() as n:
        victim: ReplicaProcess
        killed = trio.Event()

        async def hook(ctx: AdmitContext) -> None:
            chunks.append(request_keys(ctx))
            if len(chunks) == 2 and not killed.is_set():
                victim.send(signal.SIGKILL)
                ctx.abort = True
                killed.set()

        proxy = gate.proxy(hook)
        await n.start(proxy.serve)
        victim = gate.replica("r-victim", dsn=proxy.dsn(gate.db.name), cadence_ms=FAST_CADENCE_MS)
        other = gate.replica("r-other", cadence_ms=FAST_CADENCE_MS)
        try:
            await victim.start()
            recorded, days = await backfill(gate)
            with trio.fail_after(20):
                await killed.wait()
            assert victim.proc is not None
            with trio.fail_after(10):
                await victim.proc.wait()
            held = await request_row(gate, recorded)
            await other.start()
            row = await wait_done(gate, recorded)
        finally:
            await victim.stop()
            await other.stop()
        runs = await runs_by_key(gate)
        n.cancel_scope.cancel()
    keys = [idempotency_key(TRIGGER, recorded.trigger_revision, t) for t in days]
    assert chunks[0] == keys[:16]
    assert chunks[1] == keys[16:32]
    assert held["cursor_ms"] == days[15]
    assert held["admitted"] == 16
    assert_each_once(runs, keys)
    owners = {k: rows[0]["admitted_by_owner"] for k, rows in runs.items()}
    assert {owners[k] for k in keys[:16]} == {"r-victim"}
    assert {owners[k] for k in keys[16:]} == {"r-other"}
    later = [runs[k][0] for k in keys[16:]]
    assert all(r["queued_at_ms"] >= held["claim_expires_at_ms"] for r in later)
    assert (row["admitted"], row["already_admitted"], row["cursor_ms"]) == (
        BACKFILL_DAYS,
        0,
        days[-1],
    )
    report(f"backfill killed mid-chunk: {BACKFILL_DAYS} Runs, 16 by the victim")


@pytest.mark.parametrize("kind", ["trigger", "backfill"])
async def test_a_lost_commit_reply_is_never_resent_and_admits_once(
    server: EmbeddedPostgres, tmp_path: Path, kind: str
) -> None:
    """Rule: a request admit whose COMMIT reply is lost (the proxy drops the reply after the
    commit and resets the socket) is ``request_commit_unknown``, never sent again: no key is
    bound in two admits, and each key has exactly one Run. A backfill goes on from the
    committed cursor."""
    bound: list[list[str]] = []

    async def lose_first(ctx: AdmitContext) -> None:
        bound.append(request_keys(ctx))
        if len(bound) == 1:
            ctx.lose_reply = True

    async with open_gate(server, f"rq_lost_{kind}", tmp_path) as gate, trio.open_nursery() as n:
        proxy = gate.proxy(lose_first)
        await n.start(proxy.serve)
        lossy = gate.replica("r-lossy", dsn=proxy.dsn(gate.db.name), cadence_ms=FAST_CADENCE_MS)
        try:
            await lossy.start()
            if kind == "trigger":
                recorded = await trigger_now(gate)
                keys = [manual_key(TRIGGER, recorded.trigger_revision, recorded.request_id)]
            else:
                recorded, days = await backfill(gate)
                keys = [idempotency_key(TRIGGER, recorded.trigger_revision, t) for t in days]
            row = await wait_done(gate, recorded)
        finally:
            await lossy.stop()
        runs = await runs_by_key(gate)
        n.cancel_scope.cancel()
    assert [lost.error_reply for lost in proxy.lost] == [False]
    every = [k for ks in bound for k in ks]
    assert len(every) == len(set(every)), "a key was bound in two admits"
    assert_each_once(runs, keys)
    assert (row["admitted"], row["already_admitted"]) == (len(keys), 0)
    codes = [d["code"] for d in lossy.diagnostics()]
    assert codes.count("request_commit_unknown") == 1, codes


async def test_a_terminated_backend_mid_admit_is_retaken_after_the_lease(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: when the server ends the admitting session (``pg_terminate_backend``) before the
    admit reached it, nothing was admitted; the claim is left to expire and the request is
    taken again (by the same replica, under a new claim version) and admitted once."""
    held_ctx: list[AdmitContext] = []
    release = trio.Event()

    async def hold_first(ctx: AdmitContext) -> None:
        held_ctx.append(ctx)
        if len(held_ctx) == 1:
            await release.wait()

    async with open_gate(server, "rq_terminate", tmp_path) as gate, trio.open_nursery() as n:
        proxy = gate.proxy(hold_first)
        await n.start(proxy.serve)
        replica = gate.replica("r-one", dsn=proxy.dsn(gate.db.name), cadence_ms=FAST_CADENCE_MS)
        try:
            await replica.start()
            recorded = await trigger_now(gate)

            async def held() -> bool:
                return bool(held_ctx)

            await poll(held, timeout_s=20)
            first = await request_row(gate, recorded)
            killed = await fetch(
                gate.su,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name = 'qlsched-admit'",
                gate.db.name,
            )
            assert killed
            assert all(r[0] for r in killed)
            release.set()
            row = await wait_done(gate, recorded)
        finally:
            await replica.stop()
        runs = await runs_by_key(gate)
        n.cancel_scope.cancel()
    key = manual_key(TRIGGER, recorded.trigger_revision, recorded.request_id)
    assert_each_once(runs, [key])
    [run] = runs[key]
    assert run["admitted_claim_version"] > first["claim_version"]
    assert run["queued_at_ms"] >= first["claim_expires_at_ms"]
    assert row["admitted"] == 1
