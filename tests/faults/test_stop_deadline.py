"""The stop deadline holds whatever the database does (issue 21), on real processes.

A ``python -m qlsched run`` replica reaches our own PostgreSQL through
``tests.support.pgproxy`` with asyncpg's default ``sslmode=prefer`` (an SSLRequest first,
as over TCP to any real server: the path where a cut connection's cancel request left an
orphaned future that tore the bridge down at stop). The database is blocked at one point of
a round, or frozen, or shutting down, or silent; then SIGTERM. Each gate asserts the
process is gone within ``stop_timeout_ms`` + 1 s, its exit code (0 stopped in order, 3
stopped at the deadline with a round cut), that it printed only its own one-line messages
(no traceback), and the database-only exactly-once verdict afterwards.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.queries import query
from tests.faults.stop_support import (
    CADENCE_MS,
    LEASE_MS,
    TIMEOUTS,
    Gate,
    Hold,
    assert_clean_output,
    assert_exactly_once,
    assert_stopped_within,
    bound_s,
    frozen,
    open_gate,
    run_count,
    sigterm_and_time,
    table_locks,
    wait_lock_waiter,
    wait_runs,
)
from tests.integration.cluster_support import http_status
from tests.support.faults import ReplicaProcess, fetch, open_su, poll, report
from tests.support.pgproxy import PgProxy

pytestmark = pytest.mark.slow

STOPPED_IN_ORDER = 0
STOPPED_AT_DEADLINE = 3


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


def replica(
    gate: Gate, proxy: PgProxy, workdir: Path, *, stop_timeout_ms: int = 1000, http: bool = False
) -> ReplicaProcess:
    return ReplicaProcess(
        "r1",
        proxy.dsn(gate.db.name, ssl=True),
        workdir,
        lease_ms=LEASE_MS,
        cadence_ms=CADENCE_MS,
        stop_timeout_ms=stop_timeout_ms,
        http=http,
        extra_env={"QLSCHED_IDLE_IN_TRANSACTION_TIMEOUT_MS": str(TIMEOUTS.idle_in_transaction_ms)},
    )


@pytest.mark.parametrize("stop_timeout_ms", [1000, 2000])
async def test_sigterm_with_the_admit_blocked_on_a_lock(
    server: EmbeddedPostgres, tmp_path: Path, stop_timeout_ms: int
) -> None:
    """Rule: SIGTERM while the round's admit waits for a lock another session holds on
    ``runs`` (longer than the deadline): gone within stop_timeout_ms + 1 s, exit 3 (work
    cut), no traceback; afterwards a second replica admits the occurrences the cut admit
    left (its claims expired) and the window is exactly once."""
    async with open_gate(server, f"admit_lock_{stop_timeout_ms}") as gate:
        proxy = gate.proxy
        r1 = replica(gate, proxy, tmp_path, stop_timeout_ms=stop_timeout_ms)
        await r1.start()
        await wait_runs(gate.su, 1)
        async with table_locks(gate.db.superuser_dsn, ["runs"]):
            await wait_lock_waiter(gate.su, "qlsched-admit")
            await trio.sleep(0.3)
            stopped = await sigterm_and_time(r1, wait_s=bound_s(stop_timeout_ms) + 10)
        assert_stopped_within(stopped, stop_timeout_ms, {STOPPED_AT_DEADLINE})
        assert "stopped at the deadline" in stopped.log
        before = await run_count(gate.su)
        r2 = ReplicaProcess(
            "r2", gate.db.runtime_dsn, tmp_path, lease_ms=LEASE_MS, cadence_ms=CADENCE_MS
        )
        await r2.start()
        try:
            takeover_s = LEASE_MS / 1000 + 20
            await wait_runs(gate.su, before + 2 * len(gate.baseline), timeout_s=takeover_s)
        finally:
            assert await r2.stop() == STOPPED_IN_ORDER
        summary = await assert_exactly_once(gate, {"r1", "r2"})
    report(f"admit blocked, stop {stop_timeout_ms} ms: gone in {stopped.seconds:.2f} s; {summary}")


async def test_sigterm_with_the_claim_blocked_on_a_lock(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: SIGTERM while the round's claim statement waits for a lock on
    ``trigger_schedules``: the deadline cuts it; gone within the bound, exit 3, clean."""
    async with open_gate(server, "claim_lock") as gate:
        proxy = gate.proxy
        r1 = replica(gate, proxy, tmp_path)
        await r1.start()
        await wait_runs(gate.su, 1)
        async with table_locks(gate.db.superuser_dsn, ["trigger_schedules"]):
            await wait_lock_waiter(gate.su, "qlsched-claim")
            await trio.sleep(0.3)
            stopped = await sigterm_and_time(r1, wait_s=bound_s(1000) + 10)
        assert_stopped_within(stopped, 1000, {STOPPED_AT_DEADLINE})
        summary = await assert_exactly_once(gate, {"r1"})
    report(f"claim blocked: gone in {stopped.seconds:.2f} s; {summary}")


async def test_sigterm_with_the_decisions_writes_held(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: SIGTERM while the round's decision writes (Initialize of new triggers, the
    ``settle`` statement) get no reply: the deadline cuts them; gone within the bound,
    exit 3, clean; no Run was written."""
    settle = Hold(query("settle").encode())
    async with open_gate(server, "decide_held", settle, seed=False) as gate:
        proxy = gate.proxy
        settle.arm()
        r1 = replica(gate, proxy, tmp_path)
        await r1.start()
        with trio.fail_after(20):
            await settle.held.wait()
        await trio.sleep(0.3)
        stopped = await sigterm_and_time(r1, wait_s=bound_s(1000) + 10)
        settle.release()
        assert_stopped_within(stopped, 1000, {STOPPED_AT_DEADLINE})
        assert await run_count(gate.su) == 0
        summary = await assert_exactly_once(gate, {"r1"})
    report(f"decision writes held: gone in {stopped.seconds:.2f} s; {summary}")


async def test_sigterm_with_the_release_at_stop_held(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: SIGTERM while the claim statement is in flight; the claim then returns its
    rows, which the stopping round releases undecided under their fence, and those
    releases get no reply: the deadline cuts them (the claims are left to expire); gone
    within the bound, exit 3, clean."""
    claim = Hold(query("claim").encode())
    settle = Hold(query("settle").encode())
    async with open_gate(server, "settle_held", claim, settle) as gate:
        proxy = gate.proxy
        r1 = replica(gate, proxy, tmp_path)
        await r1.start()
        await wait_runs(gate.su, 1)
        claim.arm()
        with trio.fail_after(20):
            await claim.held.wait()

        async def rows_due() -> bool:
            due = await fetch(
                gate.su,
                "SELECT count(*) FROM qlsched.trigger_schedules WHERE claim_token IS NULL"
                " AND next_fire_at_ms <="
                " (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint",
            )
            return int(due[0][0]) > 0

        # The held claim must find rows to hand back once it goes through.
        await poll(rows_due, timeout_s=5, interval_s=0.02)
        started = trio.current_time()
        async with trio.open_nursery() as stopping:
            result = []

            async def stop() -> None:
                result.append(await sigterm_and_time(r1, wait_s=bound_s(1000) + 10))

            stopping.start_soon(stop)
            await trio.sleep(0.2)
            settle.arm()
            claim.release()
            with trio.fail_after(bound_s(1000)):
                await settle.held.wait()
            held_after = trio.current_time() - started
        settle.release()
        [stopped] = result
        assert_stopped_within(stopped, 1000, {STOPPED_AT_DEADLINE})
        summary = await assert_exactly_once(gate, {"r1"})
    report(
        f"release at stop held ({held_after:.2f} s after SIGTERM): gone in"
        f" {stopped.seconds:.2f} s; {summary}"
    )


async def test_sigterm_with_the_server_frozen(server: EmbeddedPostgres, tmp_path: Path) -> None:
    """Rule: SIGTERM while every process of the server is SIGSTOPped (nothing answers,
    nothing is closed): gone within the bound, exit 0 or 3 (3 when a round was in
    flight), clean; once the server runs again the window is exactly once."""
    async with open_gate(server, "frozen") as gate:
        proxy = gate.proxy
        r1 = replica(gate, proxy, tmp_path)
        await r1.start()
        await wait_runs(gate.su, 1)
        with frozen(server):
            await trio.sleep(1.0)
            stopped = await sigterm_and_time(r1, wait_s=bound_s(1000) + 10)
        assert_stopped_within(stopped, 1000, {STOPPED_IN_ORDER, STOPPED_AT_DEADLINE})
        summary = await assert_exactly_once(gate, {"r1"})
    report(f"server frozen: gone in {stopped.seconds:.2f} s, exit {stopped.code}; {summary}")


async def test_a_silent_network_is_noticed_within_the_lease(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: when the network to the server goes silent both ways (no RST, no EOF), the
    replica notices within one lease: ``/readyz`` answers 503 and it claims nothing more;
    SIGTERM then still meets the deadline (exit 0 or 3, clean)."""
    async with open_gate(server, "blackhole") as gate:
        proxy = gate.proxy
        r1 = replica(gate, proxy, tmp_path, http=True)
        await r1.start()
        assert r1.http_port is not None
        await wait_runs(gate.su, 1)
        assert await http_status(r1.http_port) == 200
        proxy.blackhole()
        silent_at = trio.current_time()

        async def not_ready() -> bool:
            assert r1.http_port is not None
            return await http_status(r1.http_port) == 503

        await poll(not_ready, timeout_s=LEASE_MS / 1000 + 5, interval_s=0.05)
        noticed_s = trio.current_time() - silent_at
        assert noticed_s <= LEASE_MS / 1000
        claims_noticed = await fetch(
            gate.su, "SELECT max(updated_at_ms) FROM qlsched.trigger_schedules"
        )
        await trio.sleep(1.0)
        assert (
            await fetch(gate.su, "SELECT max(updated_at_ms) FROM qlsched.trigger_schedules")
            == claims_noticed
        ), "the replica claimed while its network was silent"
        stopped = await sigterm_and_time(r1, wait_s=bound_s(1000) + 10)
        proxy.heal()
        assert_stopped_within(stopped, 1000, {STOPPED_IN_ORDER, STOPPED_AT_DEADLINE})
        summary = await assert_exactly_once(gate, {"r1"})
    report(
        f"silent network: /readyz 503 after {noticed_s:.2f} s (lease {LEASE_MS} ms); gone in"
        f" {stopped.seconds:.2f} s, exit {stopped.code}; {summary}"
    )


async def test_sigterm_while_the_server_shuts_down(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: SIGTERM while the server is going down (fast shutdown: its sessions are
    terminated under the replica): gone within the bound, exit 0 or 3, clean; after a
    restart the window is exactly once."""
    async with open_gate(server, "shutdown") as gate:
        proxy = gate.proxy
        r1 = replica(gate, proxy, tmp_path)
        await r1.start()
        await wait_runs(gate.su, 1)
        async with trio.open_nursery() as both:
            both.start_soon(trio.to_thread.run_sync, server.stop, "fast")
            await trio.sleep(0.05)
            stopped = await sigterm_and_time(r1, wait_s=bound_s(1000) + 10)
        await trio.to_thread.run_sync(server.start)
        assert_stopped_within(stopped, 1000, {STOPPED_IN_ORDER, STOPPED_AT_DEADLINE})
        async with open_su(gate.db.superuser_dsn) as su:  # the gate's pool died with the server
            summary = await assert_exactly_once(dataclasses.replace(gate, su=su), {"r1"})
    report(f"server shutting down: gone in {stopped.seconds:.2f} s, exit {stopped.code}; {summary}")


STARTUP_STEP = r"(readiness|start-up recovery)"
"""Readiness reads every qlsched table's definition and recovery reads ``runs``: a lock on
``runs`` stops whichever of the two comes to it first."""


@pytest.mark.parametrize(
    ("table", "step"),
    [("schema_migrations", "readiness"), ("runs", STARTUP_STEP)],
)
async def test_a_replica_started_while_a_table_is_locked_exits_1_with_one_line(
    server: EmbeddedPostgres, tmp_path: Path, table: str, step: str
) -> None:
    """Rule: a replica started while another session holds a lock its start-up needs (the
    migration ledger, ``runs``) exits 1 after the runtime role's lock_timeout with one line
    naming the step and the cause; no traceback."""
    async with open_gate(server, f"start_{table}") as gate:
        r1 = replica(gate, gate.proxy, tmp_path)
        async with table_locks(gate.db.superuser_dsn, [table]):
            started = trio.current_time()
            with pytest.raises(RuntimeError, match="exited at start"):
                await r1.start(timeout_s=TIMEOUTS.lock_timeout_ms / 1000 + 10)
            seconds = trio.current_time() - started
    assert r1.proc is not None
    assert r1.proc.returncode == 1
    log = r1.log_path.read_text()
    assert_clean_output(log)
    assert re.fullmatch(
        rf"qlsched run: {step}: a lock wait timed out \(SQLSTATE 55P03\):"
        r" another session holds a lock",
        log.strip(),
    ), log
    report(f"start with {table} locked: exit 1 after {seconds:.2f} s: {log.strip()}")


async def test_a_statement_timeout_at_startup_exits_1_with_one_line(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: a start-up step (readiness or recovery) cut by the runtime role's
    statement_timeout (here below its lock_timeout, with ``runs`` locked) exits 1 with one
    line naming the step and SQLSTATE 57014; no traceback."""
    async with open_gate(server, "start_statement") as gate:
        r1 = replica(gate, gate.proxy, tmp_path)
        await fetch(gate.su, "ALTER ROLE qlsched_runtime SET statement_timeout = '1000ms'")
        try:
            async with table_locks(gate.db.superuser_dsn, ["runs"]):
                with pytest.raises(RuntimeError, match="exited at start"):
                    await r1.start(timeout_s=20)
        finally:
            await fetch(
                gate.su,
                "ALTER ROLE qlsched_runtime SET statement_timeout ="
                f" '{TIMEOUTS.statement_timeout_ms}ms'",
            )
    assert r1.proc is not None
    assert r1.proc.returncode == 1
    log = r1.log_path.read_text()
    assert_clean_output(log)
    assert re.fullmatch(
        rf"qlsched run: {STARTUP_STEP}: a statement timed out \(SQLSTATE 57014\)", log.strip()
    ), log


async def test_sigterm_during_startup_blocked_on_a_lock(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: SIGTERM while start-up (readiness or recovery) waits for a lock on ``runs``
    cuts the start at once (nothing was scheduling yet): gone within the bound, exit 0,
    clean."""
    async with open_gate(server, "start_sigterm") as gate:
        r1 = replica(gate, gate.proxy, tmp_path)
        async with table_locks(gate.db.superuser_dsn, ["runs"]), trio.open_nursery() as nursery:

            async def starting() -> None:
                with pytest.raises(RuntimeError, match="exited at start"):
                    await r1.start(timeout_s=30)

            nursery.start_soon(starting)
            await wait_lock_waiter(gate.su, "qlsched-claim")
            stopped = await sigterm_and_time(r1, wait_s=bound_s(1000) + 10)
        assert_stopped_within(stopped, 1000, {STOPPED_IN_ORDER})
        assert "stopping during start-up" in stopped.log
    report(f"SIGTERM during start-up: gone in {stopped.seconds:.2f} s")
