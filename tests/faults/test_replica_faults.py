"""Fault gates on real processes: ``python -m qlsched run`` replicas against our own
PostgreSQL, each gate ending with the database-only exactly-once verdict
(``tests.support.faults.verify_end_state``) and, after each fault, schedule lag back below
lease + cadence + 2 s by database time.

Replicas use a 3 s lease (the gate databases' runtime role has 1 s / 0.5 s / 1.5 s
timeouts), every-second triggers alternating ``fire_once`` (grace 60 s) and ``skip``
(grace 1.5 s). Where a gate must catch a replica inside an admit, that replica reaches the
server through ``tests.support.pgproxy``, which sees the admit's Bind before it is
forwarded; the replica is given a shorter cadence so that it wins most claim rounds.
``QLSCHED_GATE_SEED`` replays a run's random choices.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_asyncio

from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.pool import Connection, Database, connect_once
from tests.support.faults import (
    LAG_BOUND_MS,
    LEASE_MS,
    NOW_MS_SQL,
    PROJECT,
    Baseline,
    GateDb,
    LagRecovery,
    ReplicaProcess,
    Start,
    clock_shift_env,
    create_gate_db,
    db_now_ms,
    every_second_triggers,
    fetch,
    fetchval,
    lag_ms,
    measured_clock_shift_s,
    open_su,
    poll,
    publish_triggers,
    report,
    running_replicas,
    scrape_metrics,
    seed_cursors,
    verify_end_state,
    wait_lag_below,
)
from tests.support.pgproxy import AdmitContext, PgProxy, unix_socket_path

pytestmark = pytest.mark.slow

TRIGGERS = 6
FAST_CADENCE_MS = 100
"""The proxied replica's cadence: it starts its round first after most ticks."""


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("QLSCHED_GATE_SEED") or random.randrange(1 << 30))
    report(f"QLSCHED_GATE_SEED={seed}")
    return random.Random(seed)


@dataclasses.dataclass
class Gate:
    db: GateDb
    su: Database
    baseline: Baseline


@contextlib.asynccontextmanager
async def open_gate(
    server: EmbeddedPostgres, name: str, *, triggers: int = TRIGGERS, lead_ms: int = 2500
) -> AsyncIterator[Gate]:
    """A fresh gate database with ``triggers`` every-second triggers, cursors seeded
    ``lead_ms`` ahead (replica start-up), and a superuser pool; in a trio-asyncio loop."""
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, name)
        await publish_triggers(db, every_second_triggers(triggers))
        async with open_su(db.superuser_dsn) as su:
            baseline = await seed_cursors(su, lead_ms=lead_ms)
            yield Gate(db, su, baseline)


@dataclasses.dataclass(frozen=True)
class HeldClaim:
    trigger_id: str
    cursor_ms: int
    version: int
    expires_at_ms: int


async def claims_of(su: Database, owner: str) -> list[HeldClaim]:
    rows = await fetch(
        su,
        "SELECT trigger_id, next_fire_at_ms, claim_version, claim_expires_at_ms"
        " FROM qlsched.trigger_schedules WHERE claim_owner = $1 AND claim_token IS NOT NULL",
        owner,
    )
    return [HeldClaim(r[0], r[1], r[2], r[3]) for r in rows]


async def run_for(su: Database, trigger_id: str, scheduled_for_ms: int) -> Any:
    rows = await fetch(
        su,
        "SELECT admitted_by_owner, admitted_claim_version, queued_at_ms FROM qlsched.runs"
        " WHERE project_id = $1 AND trigger_id = $2 AND scheduled_for_ms = $3",
        PROJECT,
        trigger_id,
        scheduled_for_ms,
    )
    assert len(rows) <= 1
    return rows[0] if rows else None


async def check_taken_over_after_expiry(su: Database, held: list[HeldClaim]) -> int:
    """Each held claim's occurrence: no Run under the held version, none before its expiry.
    Returns how many got a Run (the rest were skipped by policy, counted by the verifier)."""
    runs = 0
    for h in held:
        cursor = await fetchval(
            su,
            "SELECT next_fire_at_ms FROM qlsched.trigger_schedules"
            " WHERE project_id = $1 AND trigger_id = $2",
            PROJECT,
            h.trigger_id,
        )
        assert cursor > h.cursor_ms, f"{h} never taken over"
        run = await run_for(su, h.trigger_id, h.cursor_ms)
        if run is not None:
            runs += 1
            assert run["admitted_claim_version"] > h.version, (h, dict(run))
            assert run["queued_at_ms"] >= h.expires_at_ms, (h, dict(run))
    return runs


async def finish(gate: Gate, replicas: list[ReplicaProcess], owners: set[str]) -> str:
    """Stop every replica (in order, SIGTERM) and verify the end state."""
    codes = [await r.stop() for r in replicas]
    assert all(code in (0, None) for code in codes), [(r.owner, r.log_tail()) for r in replicas]
    verdict = await verify_end_state(gate.su, gate.baseline, owners=owners)
    assert verdict.problems == []
    return verdict.summary()


def replica(
    gate: Gate, owner: str, workdir: Path, *, dsn: str | None = None, **kwargs: Any
) -> ReplicaProcess:
    return ReplicaProcess(owner, dsn or gate.db.runtime_dsn, workdir, **kwargs)


async def test_replica_sigkill_mid_admit_repeatedly(
    server: EmbeddedPostgres, tmp_path: Path, rng: random.Random
) -> None:
    """Rule: a replica killed inside an admit loses nothing and duplicates nothing.

    Four SIGKILLs of a proxied replica at random admits, two ways: ``unsent`` (killed with
    its admit not yet on the wire: its claims are stranded and must be taken over only
    after their database-time expiry, under a higher claim version) and ``sent`` (killed
    with the admit delivered: it commits, each of its occurrences has exactly that one Run).
    The victim restarts under the same owner name (so only token/version fence it).
    After each kill lag returns below the bound; at the end, exactly once.
    """
    modes = ["unsent", "sent"] + [rng.choice(["unsent", "sent"]) for _ in range(2)]
    rng.shuffle(modes)
    armed: dict[str, Any] = {}
    fired = trio.Event()
    records: list[dict[str, Any]] = []

    async with open_gate(server, "sigkill") as gate, trio.open_nursery() as nursery:
        victim: ReplicaProcess

        async def kill_after_forward(ctx: AdmitContext) -> None:
            await ctx.forwarded.wait()
            victim.send(signal.SIGKILL)

        async def hook(ctx: AdmitContext) -> None:
            nonlocal fired
            if not armed or ctx.number < armed["at"]:
                return
            records.append({"mode": armed["mode"], "keys": ctx.idempotency_keys()})
            if armed["mode"] == "unsent":
                victim.send(signal.SIGKILL)
                ctx.abort = True
            else:
                nursery.start_soon(kill_after_forward, ctx)
            armed.clear()
            fired.set()

        proxy = PgProxy(unix_socket_path(server.socket_dir, server.port), on_admit=hook)
        await nursery.start(proxy.serve)
        victim = replica(
            gate, "r-victim", tmp_path, dsn=proxy.dsn(gate.db.name), cadence_ms=FAST_CADENCE_MS
        )
        others = [replica(gate, f"r-{n}", tmp_path) for n in ("a", "b")]
        recoveries: list[LagRecovery] = []
        async with running_replicas([victim, *others]):
            for i, mode in enumerate(modes):
                armed.update(at=proxy.admits + rng.randint(1, 3), mode=mode)
                with trio.fail_after(30):
                    await fired.wait()
                fired = trio.Event()
                assert victim.proc is not None
                with trio.fail_after(10):
                    await victim.proc.wait()
                assert victim.proc.returncode == -signal.SIGKILL
                records[i]["held"] = await claims_of(gate.su, victim.owner)
                # The victim restarts (same owner name) while the others take over.
                async with trio.open_nursery() as restart:
                    restart.start_soon(victim.start)
                    recoveries.append(await wait_lag_below(gate.su))
            summary = await finish(gate, [victim, *others], {victim.owner, "r-a", "r-b"})
        nursery.cancel_scope.cancel()

    stranded = taken = landed = 0
    async with trio_asyncio.open_loop(), open_su(gate.db.superuser_dsn) as su:
        for rec in records:
            keys = rec["keys"]
            assert keys, rec
            if rec["mode"] == "unsent":
                # The batch never reached the server: every one of its rows stayed claimed.
                assert {h.trigger_id for h in rec["held"]} >= {k.split(":")[3] for k in keys}
                stranded += len(rec["held"])
                taken += await check_taken_over_after_expiry(su, rec["held"])
            else:
                for key in keys:
                    rows = await fetch(
                        su,
                        "SELECT admitted_by_owner FROM qlsched.runs WHERE idempotency_key = $1",
                        key,
                    )
                    assert [r[0] for r in rows] == [victim.owner], key
                    landed += 1
    report(
        f"sigkill gate: kills {modes}; {stranded} claims stranded by unsent kills, {taken} of"
        f" them later run under a newer fence after expiry (the rest skipped by policy);"
        f" {landed} occurrences landed by sent kills; lag peaks"
        f" {[r.peak_ms for r in recoveries]} ms, back below {LAG_BOUND_MS} ms after"
        f" {[round(r.recovered_after_s, 1) for r in recoveries]} s; {summary}"
    )


async def test_sigstop_past_lease_late_admit_is_refused_by_the_fence(
    server: EmbeddedPostgres, tmp_path: Path, rng: random.Random
) -> None:
    """Rule: a replica stopped past its lease cannot write when it wakes up.

    The proxied replica is SIGSTOPped at a random admit, before that admit leaves it. While
    it sleeps its claims expire by database time and the other replicas take the rows over.
    After SIGCONT its admit is delivered: the fence refuses every row (its metrics count
    them as ``fence_lost``), no Run is admitted under its stale claims, and its diagnostics
    show no write error. Lag returns below the bound; at the end, exactly once.
    """
    held_ctx: list[AdmitContext] = []
    stopped = trio.Event()
    release = trio.Event()
    arm_at: list[int] = []

    async with open_gate(server, "sigstop") as gate, trio.open_nursery() as nursery:
        victim: ReplicaProcess

        async def hook(ctx: AdmitContext) -> None:
            if not arm_at or ctx.number != arm_at[0]:
                return
            victim.send(signal.SIGSTOP)
            held_ctx.append(ctx)
            stopped.set()
            await release.wait()

        proxy = PgProxy(unix_socket_path(server.socket_dir, server.port), on_admit=hook)
        await nursery.start(proxy.serve)
        victim = replica(
            gate,
            "r-victim",
            tmp_path,
            dsn=proxy.dsn(gate.db.name),
            cadence_ms=FAST_CADENCE_MS,
            http=True,
        )
        # One row a round for the others: every replica wakes when the rows fall due, and
        # under load the victim's claim, one proxy hop behind, could otherwise find none
        # for longer than the wait below (seen once in a full run). Catching up, they still
        # take the held rows over one after the other once the lease runs out.
        one_a_round = {"QLSCHED_CLAIM_BUDGET": "1", "QLSCHED_CATCH_UP_BUDGET": "1"}
        others = [replica(gate, f"r-{n}", tmp_path, extra_env=one_a_round) for n in ("a", "b")]
        async with running_replicas([victim, *others]):
            assert victim.http_port is not None
            before = await scrape_metrics(victim.http_port)
            arm_at.append(proxy.admits + rng.randint(2, 4))
            with trio.fail_after(30):
                await stopped.wait()
            held = await claims_of(gate.su, victim.owner)
            keys = held_ctx[0].idempotency_keys()
            assert held
            assert {h.trigger_id for h in held} >= {k.split(":")[3] for k in keys}
            stop_ms = await db_now_ms(gate.su)
            # Past the lease, until the other replicas have moved every held row on.
            peak_ms = 0
            with trio.fail_after(LEASE_MS / 1000 + 20):
                while True:
                    peak_ms = max(peak_ms, await lag_ms(gate.su))
                    now = await db_now_ms(gate.su)
                    cursors = {
                        r[0]: r[1]
                        for r in await fetch(
                            gate.su,
                            "SELECT trigger_id, next_fire_at_ms FROM qlsched.trigger_schedules",
                        )
                    }
                    if now > max(h.expires_at_ms for h in held) and all(
                        cursors[h.trigger_id] > h.cursor_ms for h in held
                    ):
                        break
                    await trio.sleep(0.1)
            slept_ms = await db_now_ms(gate.su) - stop_ms
            victim.send(signal.SIGCONT)
            release.set()
            fence_lost = 'qlsched_outcomes_total{code="fence_lost"}'
            with trio.fail_after(10):
                while True:
                    after = await scrape_metrics(victim.http_port)
                    if after[fence_lost] - before[fence_lost] >= len(keys):
                        break
                    await trio.sleep(0.1)
            parts = {
                name: after[name] - before.get(name, 0)
                for name in after
                if name.startswith("qlsched_fence_lost_total") and after[name] > before[name]
            }
            for key in keys:
                rows = await fetch(
                    gate.su,
                    "SELECT admitted_by_owner FROM qlsched.runs WHERE idempotency_key = $1",
                    key,
                )
                assert victim.owner not in [r[0] for r in rows], key
            taken = await check_taken_over_after_expiry(gate.su, held)
            recovery = await wait_lag_below(gate.su)
            assert peak_ms < LAG_BOUND_MS
            summary = await finish(gate, [victim, *others], {victim.owner, "r-a", "r-b"})
        nursery.cancel_scope.cancel()
    assert victim.diagnostics() == []
    report(
        f"sigstop gate: stopped holding {len(held)} claims for {slept_ms} ms of database"
        f" time (lease {LEASE_MS} ms); {taken} taken over and run by others, the rest skipped"
        f" by policy; the late admit of {len(keys)} occurrences was refused: fence_lost"
        f" {parts}; 0 Runs under the stale fence; lag peak {max(peak_ms, recovery.peak_ms)} ms;"
        f" {summary}"
    )


async def test_postgres_immediate_restart_under_load(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: replicas ride out a PostgreSQL crash-restart by themselves.

    Three replicas on twelve every-second triggers; the server is stopped in immediate mode
    (no shutdown checkpoint: crash recovery on start) and started again. Without any
    restart of their own, every replica fails rounds, then runs successful rounds again
    (its /metrics: rounds grow, failures stop growing); lag returns below the bound; no
    acknowledged admit is lost and none is duplicated.
    """
    async with open_gate(server, "restart", triggers=12) as gate:
        replicas = [replica(gate, f"r-{n}", tmp_path, http=True) for n in ("a", "b", "c")]
        async with running_replicas(replicas):
            await wait_lag_below(gate.su)
            runs_before = await fetchval(gate.su, "SELECT count(*) FROM qlsched.runs")
            before = [await scrape_metrics(r.http_port or 0) for r in replicas]
            await trio.to_thread.run_sync(server.stop, "immediate")

            async def outage_seen() -> bool:
                """A replica has failed a round since the stop (the outage reached them)."""
                now = [await scrape_metrics(r.http_port or 0) for r in replicas]
                return any(
                    b["qlsched_round_failures_total"] > a["qlsched_round_failures_total"]
                    for a, b in zip(before, now, strict=True)
                )

            await poll(outage_seen, timeout_s=30, interval_s=0.1)
            await trio.to_thread.run_sync(server.start)
            async with open_su(gate.db.superuser_dsn) as su:
                recovery = await wait_lag_below(su)
                first = [await scrape_metrics(r.http_port or 0) for r in replicas]

                async def all_rounded() -> bool:
                    """Every replica has run rounds since ``first`` (scraped into ``second``)."""
                    second[:] = [await scrape_metrics(r.http_port or 0) for r in replicas]
                    return all(
                        b["qlsched_rounds_total"] > a["qlsched_rounds_total"]
                        for a, b in zip(first, second, strict=True)
                    )

                second: list[dict[str, float]] = []
                await poll(all_rounded, timeout_s=30, interval_s=0.1)
                for r, a, b in zip(replicas, first, second, strict=True):
                    assert r.proc is not None
                    assert r.proc.returncode is None, r.owner
                    assert b["qlsched_rounds_total"] > a["qlsched_rounds_total"], r.owner
                    assert b["qlsched_round_failures_total"] == a["qlsched_round_failures_total"]
                failures = {
                    r.owner: int(m["qlsched_round_failures_total"])
                    for r, m in zip(replicas, second, strict=True)
                }
                assert sum(failures.values()) > 0, "the restart did not reach the replicas"
                runs_after = await fetchval(su, "SELECT count(*) FROM qlsched.runs")
                assert runs_after > runs_before
                gate.su = su
                summary = await finish(gate, replicas, {r.owner for r in replicas})
    report(
        f"restart gate: round failures per replica {failures}; lag peak {recovery.peak_ms}"
        f" ms, back below {LAG_BOUND_MS} ms after {recovery.recovered_after_s:.1f} s;"
        f" {summary}"
    )


async def test_skewed_os_clocks_do_not_change_runs(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: decisions use only database time (docs/contract.md §2).

    Two replicas whose OS wall clocks are an hour ahead and an hour behind (libfaketime,
    or a sitecustomize shift where it is not installed; the shift is measured first) share
    the schedule. The Runs are those a true clock gives: from the first Run on, every
    occurrence has exactly one Run, none skipped or coalesced, each admitted within a
    lease of its time and never before it, and no cursor ahead of database time by more
    than one occurrence. An hour-ahead clock would skip or coalesce an hour; an hour-behind
    one would never fire.
    """
    ahead_env, how = clock_shift_env(3600, tmp_path)
    behind_env, _ = clock_shift_env(-3600, tmp_path)
    for env, shift in ((ahead_env, 3600), (behind_env, -3600)):
        measured = await trio.to_thread.run_sync(measured_clock_shift_s, env)
        assert abs(measured - shift) < 60, (how, measured)
    async with open_gate(server, "clocks") as gate:
        ahead = replica(gate, "r-ahead", tmp_path, extra_env=ahead_env, cadence_ms=200)
        behind = replica(gate, "r-behind", tmp_path, extra_env=behind_env, cadence_ms=200)
        try:
            await ahead.start()

            async def first_run() -> bool:
                return bool(await fetchval(gate.su, "SELECT count(*) FROM qlsched.runs"))

            await poll(first_run, timeout_s=20)
            rows = await fetch(
                gate.su,
                "SELECT project_id, trigger_id, next_fire_at_ms, skipped_total, coalesced_total"
                " FROM qlsched.trigger_schedules",
            )
            gate.baseline = {(r[0], r[1]): Start(r[2], r[3], r[4]) for r in rows}

            # The window: the hour-ahead replica alone, both (the hand-over), then the
            # hour-behind replica alone; each phase lasts until its replica has admitted
            # Runs of its own (conditions, not sleeps: a slow machine only waits longer).
            since = min(s.cursor_ms for s in gate.baseline.values())

            def admitted_by(owner: str, at_least: int) -> Callable[[], Awaitable[bool]]:
                # Runs of the window only (from the baseline's cursors), as the end counts.
                async def check() -> bool:
                    count = await fetchval(
                        gate.su,
                        "SELECT count(*) FROM qlsched.runs WHERE admitted_by_owner = $1"
                        " AND scheduled_for_ms >= $2",
                        owner,
                        since,
                    )
                    return int(count) >= at_least

                return check

            await poll(admitted_by("r-ahead", 3), timeout_s=30)
            await behind.start()
            await ahead.stop()
            await poll(admitted_by("r-behind", 3), timeout_s=30)
            now = await db_now_ms(gate.su)
            cursors = await fetch(gate.su, "SELECT next_fire_at_ms FROM qlsched.trigger_schedules")
            assert all(c[0] <= now + 1000 for c in cursors), (now, cursors)
            summary = await finish(gate, [ahead, behind], {"r-ahead", "r-behind"})
        finally:
            await ahead.stop()
            await behind.stop()
        verdict = await verify_end_state(gate.su, gate.baseline)
        assert verdict.missing_counted == 0, "occurrences skipped or coalesced"
        lags = await fetch(
            gate.su,
            "SELECT admitted_by_owner, count(*), max(queued_at_ms - scheduled_for_ms)"
            " FROM qlsched.runs WHERE scheduled_for_ms >= $1 GROUP BY 1",
            min(s.cursor_ms for s in gate.baseline.values()),
        )
        by_owner = {r[0]: (r[1], r[2]) for r in lags}
        assert set(by_owner) == {"r-ahead", "r-behind"}, by_owner
        assert all(0 <= lag < LEASE_MS for _, lag in by_owner.values()), by_owner
    report(f"clock gate ({how}): Runs and max lag (ms) per replica {by_owner}; {summary}")


async def test_stuck_idle_in_transaction_session_is_cut_by_the_role_timeout(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: a runtime session stalled inside a transaction cannot hold a schedule row past
    the role's idle_in_transaction_session_timeout (docs/contract.md §4), far below the lease.

    A qlsched_runtime session locks one schedule row (``SELECT ... FOR UPDATE``) and sits
    idle for longer than the lag bound. The server must end that session (about 1 s), the
    row must move on while the session would still be sitting (well within a lease, also
    when a replica had claimed it just before it was locked), and the session's next
    statement must fail. Lag returns below the bound; at the end, exactly once.
    """
    target = "t00"
    sit_s = LAG_BOUND_MS / 1000 + 1
    async with open_gate(server, "idle") as gate:
        replicas = [replica(gate, f"r-{n}", tmp_path) for n in ("a", "b", "c")]
        async with running_replicas(replicas):
            await wait_lag_below(gate.su)
            locked: dict[str, Any] = {}
            moved_at: list[int] = []
            log_offset = server.log_path.stat().st_size

            async def sit(conn: Connection) -> None:
                tx = conn.transaction()
                await tx.start()
                row = await conn.fetchrow(
                    "SELECT next_fire_at_ms, pg_backend_pid(), "  # noqa: S608 (a constant)
                    f"{NOW_MS_SQL} FROM qlsched.trigger_schedules"
                    " WHERE project_id = $1 AND trigger_id = $2 FOR UPDATE",
                    PROJECT,
                    target,
                )
                assert row is not None
                locked.update(cursor=row[0], pid=row[1], at=row[2])
                await asyncio.sleep(sit_s)
                try:
                    await conn.fetchval("SELECT 1")
                except Exception as exc:
                    locked["error"] = type(exc).__name__
                    locked["sqlstate"] = getattr(exc, "sqlstate", None)
                else:
                    await tx.rollback()

            async def hold() -> None:
                with contextlib.suppress(Exception):
                    await connect_once(gate.db.runtime_dsn, sit)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(hold)

                async def is_locked() -> bool:
                    return "at" in locked

                await poll(is_locked, timeout_s=10, interval_s=0.01)

                async def moved_on() -> bool:
                    cursor = await fetchval(
                        gate.su,
                        "SELECT next_fire_at_ms FROM qlsched.trigger_schedules"
                        " WHERE project_id = $1 AND trigger_id = $2",
                        PROJECT,
                        target,
                    )
                    if cursor > locked["cursor"]:
                        moved_at.append(await db_now_ms(gate.su))
                        return True
                    return False

                # Well before the session would let go by itself.
                await poll(moved_on, timeout_s=sit_s - 1.5)
                session_gone = not await fetchval(
                    gate.su,
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                    locked["pid"],
                )
            assert session_gone, "the stalled session still exists"
            assert "error" in locked, "the stalled session's next statement succeeded"
            held_ms = moved_at[0] - locked["at"]
            # A replica that claimed the row just before it was locked sends its Fire again
            # once the lock goes (``engine.ahead``): the row never waits for that lease.
            assert held_ms < LEASE_MS * 2 // 3, held_ms
            log = server.log_path.read_bytes()[log_offset:].decode(errors="replace")
            assert "idle-in-transaction timeout" in log
            recovery = await wait_lag_below(gate.su)
            summary = await finish(gate, replicas, {r.owner for r in replicas})
    report(
        f"idle-in-transaction gate: the row moved on {held_ms} ms after it was locked by a"
        f" session meant to sit {sit_s:.1f} s; that session's next statement failed with"
        f" {locked['error']} (SQLSTATE {locked['sqlstate']}), the server logged the"
        f" idle-in-transaction timeout; lag peak {recovery.peak_ms} ms;"
        f" {summary}"
    )


async def test_one_locked_schedule_row_does_not_hold_back_its_batch(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """Rule: one schedule row locked by another session delays only its own occurrence.

    A replica's batch admit meets a row that a superuser session (no timeouts, as an admin
    publish or a DBA's transaction) holds ``FOR UPDATE`` for longer than the lease. The
    batch's other occurrences must still be admitted before their next occurrence (no
    skip, no coalescing); only the locked one may wait for the lock. At the end, exactly
    once.
    """
    locked = trio.Event()
    unlock = trio.Event()
    batch: list[tuple[list[str], int]] = []

    async with open_gate(server, "lockedrow") as gate, trio.open_nursery() as nursery:

        async def hold_row(trigger_id: str) -> None:
            async def fn(conn: Connection) -> None:
                async with conn.transaction():
                    await conn.fetch(
                        "SELECT 1 FROM qlsched.trigger_schedules"
                        " WHERE project_id = $1 AND trigger_id = $2 FOR UPDATE",
                        PROJECT,
                        trigger_id,
                    )
                    locked.set()
                    # asyncio side of the bridge: poll the Trio event.
                    while True:
                        if unlock.is_set():
                            break
                        await asyncio.sleep(0.05)

            await connect_once(gate.db.superuser_dsn, fn)

        async def hook(ctx: AdmitContext) -> None:
            if batch or ctx.number < 3:
                return
            keys = ctx.idempotency_keys()
            batch.append((keys, await db_now_ms(gate.su)))
            nursery.start_soon(hold_row, keys[0].split(":")[3])
            await locked.wait()

        proxy = PgProxy(unix_socket_path(server.socket_dir, server.port), on_admit=hook)
        await nursery.start(proxy.serve)
        alone = replica(
            gate, "r-alone", tmp_path, dsn=proxy.dsn(gate.db.name), cadence_ms=FAST_CADENCE_MS
        )
        async with running_replicas([alone]):

            async def batch_seen() -> bool:
                return bool(batch)

            await poll(batch_seen, timeout_s=30)
            await trio.sleep(LEASE_MS / 1000 + 1)
            unlock.set()
            await wait_lag_below(gate.su)
            keys, _ = batch[0]
            late = {}
            for key in keys[1:]:
                rows = await fetch(
                    gate.su,
                    "SELECT queued_at_ms - scheduled_for_ms FROM qlsched.runs"
                    " WHERE idempotency_key = $1",
                    key,
                )
                if not rows or rows[0][0] >= 1000:
                    late[key] = rows[0][0] if rows else None
            summary = await finish(gate, [alone], {alone.owner})
        nursery.cancel_scope.cancel()
    codes = sorted({(d["code"], d.get("sqlstate")) for d in alone.diagnostics()})
    report(
        f"locked-row gate: {len(keys) - 1} unlocked rows of the batch; late or not run:"
        f" {late}; diagnostics {codes}; {summary}"
    )
    assert late == {}
