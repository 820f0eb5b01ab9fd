"""Cluster control on a real PostgreSQL: the ADR's two-pool vertical integration.

Each test opens whole replicas with ``open_cluster_control`` (or ``qlsched.serve``) against a
fresh migrated database, as the runtime role, exactly as ``qlsched run`` does: validated
config, two pools (claims READ COMMITTED, admits SERIALIZABLE), readiness, startup recovery,
the lifecycle, HTTP admission. Occurrences are made due by moving a cursor into the database's
past (the published cron is yearly), so each test knows exactly which occurrences exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import pytest
import trio

import qlsched
from qlsched.cluster.root import ClusterControl, open_cluster_control
from qlsched.core.config import Config
from qlsched.core.fence import Claim
from qlsched.postgres.errors import SchemaNotReady
from qlsched.postgres.pool import Connection, Database, open_database
from qlsched.postgres.store import PostgresStore
from tests.integration.cluster_support import (
    Superuser,
    assert_exactly_once,
    control_config,
    http_get,
    http_status,
    open_superuser,
    publish_triggers,
    trigger,
    wait_until,
)
from tests.support.exposition import profile_problems, qlsched_samples
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

FULL_TRACE = [
    "pools_opened",
    "ready",
    "recovered",
    "admit_prepared",
    "lifecycle_started",
    "http_opened",
    "http_closed",
    "lifecycle_stopped",
    "pools_closing",
]
# What a killed idle backend may leave behind in the sink: a round or a write that met the
# dead connection, reported by code and exception class (never an exception escaping).
CONNECTION_LOSS_CODES = frozenset(
    {
        "round_failed",
        "claim_task_failed",
        "commit_unknown",
        "commit_unknown_landed",
        "commit_unknown_not_landed",
        "store_failed",
        "backlog_failed",
    }
)


async def _all_scheduled(su: Superuser, ids: Sequence[str], scheduled_for_ms: int) -> bool:
    rows = await su.schedules()
    return all(rows[i]["last_scheduled_at_ms"] == scheduled_for_ms for i in ids)


async def _wait_admitted(
    su: Superuser, ids: Sequence[str], scheduled_for_ms: int, *, timeout_s: float = 10.0
) -> None:
    async def probe() -> bool:
        return await _all_scheduled(su, ids, scheduled_for_ms)

    await wait_until(probe, timeout_s=timeout_s, what=f"{list(ids)} admitted")


async def _more_rounds(controls: Sequence[ClusterControl], n: int = 3) -> None:
    """Let every control run ``n`` more whole rounds (duplicates would show up by then)."""
    for control in controls:
        await control.lifecycle.wait_rounds(control.lifecycle.statistics().rounds + n)


def _sample(control: ClusterControl, name: str, labels: dict[str, str] | None = None) -> float:
    value = control.metrics.registry.get_sample_value(
        name, {"profile": "cluster", **(labels or {})}
    )
    return 0.0 if value is None else value


async def _backend_pid(db: Database) -> int:
    async def fn(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))

    return await db.run(fn)


async def _start_concurrently(
    nursery: trio.Nursery, configs: Sequence[Config], sinks: Sequence[MemorySink]
) -> list[ClusterControl]:
    """Start the replicas at the same time (each through ``qlsched.serve``)."""
    started: dict[str, ClusterControl] = {}
    async with trio.open_nursery() as starters:
        for config, sink in zip(configs, sinks, strict=True):

            async def start(config: Config = config, sink: MemorySink = sink) -> None:
                started[config.owner] = await nursery.start(
                    partial(qlsched.serve, config, sink=sink)
                )

            starters.start_soon(start)
    return [started[c.owner] for c in configs]


async def test_two_controls_claim_once_at_initialisation_and_admit_exactly_once(
    pg_db: TestDatabase,
) -> None:
    """Rule: two independent replicas (different owners, different backends) on one database
    claim each uninitialised row exactly once between them (``claim_version`` 0 -> 1, one
    ``initialized`` outcome in total), and admit each due occurrence exactly once: 1 Run,
    its pristine Attempt and 2 events, under one of the two owners. A second claim, a second
    initialisation, a duplicate or partial Run, or two replicas sharing a backend fails."""
    ids = [f"t{i}" for i in range(6)]
    await publish_triggers(pg_db, [trigger(i) for i in ids])
    # A budget of 2 makes both replicas take part in every wave rather than one taking all.
    configs = [control_config(pg_db.runtime_dsn, owner, claim_budget=2) for owner in ("a", "b")]
    sinks = [MemorySink(replica=c.owner) for c in configs]
    waves: list[int] = []
    async with open_superuser(pg_db) as su:
        async with trio.open_nursery() as nursery:
            controls = await _start_concurrently(nursery, configs, sinks)
            await _initialise_and_fire(su, controls, ids, waves)
            for control in controls:
                control.request_stop()
        for scheduled_for in waves:
            for i in ids:
                occ = await su.occurrence(i, scheduled_for)
                assert_exactly_once(occ)
                assert occ.runs[0]["admitted_by_owner"] in ("a", "b")
        assert await su.run_count() == len(ids) * len(waves)
    assert sum(_sample(c, "qlsched_admits_total") for c in controls) == len(ids) * len(waves)
    for sink in sinks:
        assert sink.items == [], [d.code for d in sink.items]


async def _initialise_and_fire(
    su: Superuser, controls: Sequence[ClusterControl], ids: Sequence[str], waves: list[int]
) -> None:
    await su.wait_initialised(ids)
    await _more_rounds(controls)
    rows = await su.schedules()
    for i in ids:
        assert rows[i]["claim_version"] == 1, f"{i} claimed {rows[i]['claim_version']} times"
        assert rows[i]["claim_token"] is None
        assert rows[i]["state_version"] == 2  # one claim, one initialize
    initialized = [_sample(c, "qlsched_outcomes_total", {"code": "initialized"}) for c in controls]
    assert sum(initialized) == len(ids)

    # Independent replicas: each has backends of its own, named by pool. (The store's pools
    # are private; a test may look.)
    pids = [
        (await _backend_pid(c.store._claim_db), await _backend_pid(c.store._admit_db))
        for c in controls
    ]
    assert len({pid for pair in pids for pid in pair}) == 2 * len(controls), pids
    names = {b["pid"]: b["application_name"] for b in await su.runtime_backends()}
    for claim_pid, admit_pid in pids:
        assert names.get(claim_pid) == "qlsched-claim"
        assert names.get(admit_pid) == "qlsched-admit"

    for _ in range(2):
        scheduled_for = await su.make_due(ids)
        await _wait_admitted(su, ids, scheduled_for)
        await _more_rounds(controls)
        waves.append(scheduled_for)


async def _claim_by_hand(pg_db: TestDatabase, owner: str, lease_ms: int) -> list[Claim]:
    """Claim with the store API on pools of our own, then close them (the holder is gone)."""
    async with (
        open_database(pg_db.runtime_dsn) as claim_db,
        open_database(pg_db.runtime_dsn, isolation="serializable") as admit_db,
    ):
        return await PostgresStore(claim_db, admit_db).claim(owner, 16, lease_ms)


async def test_takeover_admits_only_after_database_time_expiry(pg_db: TestDatabase) -> None:
    """Rule: a claim whose holder went away is taken over only once the database clock has
    passed its expiry. While the lease is live the running replica claims round after round
    and never touches the row; afterwards it admits the occurrence exactly once under its
    own owner and a new claim version, at a database time at or after the expiry. A
    takeover before expiry (or none at all) fails."""
    await publish_triggers(pg_db, [trigger("t")])
    sink = MemorySink(replica="b")
    async with open_superuser(pg_db) as su:
        scheduled_for = await su.make_due(["t"])
        (held,) = await _claim_by_hand(pg_db, "holder", 6_000)
        assert held.cursor_ms == scheduled_for
        # Test-side move: the holder's lease ends 2 s from now by the database clock (a
        # real expiry, only shorter than the 6 s the readiness floor imposes on a replica).
        expires = await su.now_ms() + 2_000
        await su.execute(
            "UPDATE qlsched.trigger_schedules SET claim_expires_at_ms = $1 WHERE trigger_id = 't'",
            expires,
        )
        async with open_cluster_control(control_config(pg_db.runtime_dsn, "b"), sink=sink) as b:
            rounds_before = b.lifecycle.statistics().rounds
            while await su.now_ms() < expires - 100:
                row = await su.schedule("t")
                assert row["claim_owner"] == "holder"
                assert row["claim_token"] == held.fence.token
                assert row["claim_version"] == held.fence.version
                assert await su.run_count() == 0, "admitted while the holder's lease was live"
                await trio.sleep(0.05)
            assert b.lifecycle.statistics().rounds > rounds_before + 5, "b was not claiming"
            await _wait_admitted(su, ["t"], scheduled_for, timeout_s=5)
        occ = await su.occurrence("t", scheduled_for)
    assert_exactly_once(occ, owner="b")
    run = occ.runs[0]
    assert run["admitted_claim_version"] == held.fence.version + 1
    assert run["admitted_claim_token"] != held.fence.token
    assert run["queued_at_ms"] >= expires
    assert sink.items == [], [d.code for d in sink.items]


async def test_pools_recover_after_idle_backends_are_terminated(pg_db: TestDatabase) -> None:
    """Rule: a pool whose idle backends were killed (``pg_terminate_backend``) reconnects by
    itself: the next rounds still admit every due occurrence exactly once, on new backends,
    no exception leaves the control, and the most the kill leaves is a diagnostic of a
    connection-loss kind. A control that stops admitting, raises, or reuses a dead
    connection fails."""
    ids = ["t0", "t1", "t2"]
    await publish_triggers(pg_db, [trigger(i) for i in ids])
    sink = MemorySink(replica="r")
    waves: list[int] = []
    # A slower cadence keeps the backends idle most of the time, so the kill finds them so.
    config = control_config(pg_db.runtime_dsn, "r", cadence_ms=200)
    async with open_superuser(pg_db) as su:
        async with open_cluster_control(config, sink=sink) as control:
            await su.wait_initialised(ids)
            waves.append(await su.make_due(ids))
            await _wait_admitted(su, ids, waves[-1])
            victims: list[tuple[int, str]] = []

            async def both_killed() -> bool:
                # Each pool's backend is killed while idle: a busy one is tried again.
                victims.extend(await su.terminate_idle_runtime_backends())
                return {name for _, name in victims} >= {"qlsched-claim", "qlsched-admit"}

            await wait_until(both_killed, what="the claim and admit backends killed while idle")
            killed = {pid for pid, _ in victims}

            async def gone() -> bool:
                return not {b["pid"] for b in await su.runtime_backends()} & killed

            await wait_until(gone, what="terminated backends gone")
            for _ in range(2):
                waves.append(await su.make_due(ids))
                await _wait_admitted(su, ids, waves[-1])
            live = {b["pid"] for b in await su.runtime_backends()}
            assert live, "no backend after recovery"
            assert not live & killed
            assert control.lifecycle.statistics().running
        for scheduled_for in waves:
            for i in ids:
                assert_exactly_once(await su.occurrence(i, scheduled_for), owner="r")
    unexpected = [d for d in sink.items if d.code not in CONNECTION_LOSS_CODES]
    assert unexpected == []


@pytest.mark.parametrize(
    ("breakage", "finding"),
    [
        pytest.param(
            "REVOKE INSERT ON qlsched.run_events FROM qlsched_runtime",
            "missing grant: INSERT on table run_events to qlsched_runtime",
            id="grant-revoked",
        ),
        pytest.param(
            "DELETE FROM qlsched.capability",
            "capability qlsched.cluster_scheduler is missing",
            id="capability-removed",
        ),
    ],
)
async def test_not_ready_schema_never_starts_the_lifecycle(
    pg_db: TestDatabase, breakage: str, finding: str
) -> None:
    """Rule: readiness false means the lifecycle never starts: ``open_cluster_control``
    raises ``SchemaNotReady`` naming the finding, the body never runs, no claim is ever
    taken (the due row's ``claim_version`` and ``state_version`` unchanged) and the pools
    are closed (no runtime backend left)."""
    await publish_triggers(pg_db, [trigger("t")])
    sink = MemorySink(replica="r")
    async with open_superuser(pg_db) as su:
        before = await su.schedule("t")
        assert before["next_fire_at_ms"] is None  # uninitialised: due for any claimer
        await su.execute(breakage)
        body_ran = False
        with pytest.raises(SchemaNotReady, match=finding):
            async with open_cluster_control(control_config(pg_db.runtime_dsn, "r"), sink=sink):
                body_ran = True
        assert not body_ran
        # Give a lifecycle that had (wrongly) started time to claim before looking.
        await trio.sleep(0.2)
        after = await su.schedule("t")
        assert after["claim_version"] == before["claim_version"]
        assert after["state_version"] == before["state_version"]
        assert after["claim_token"] is None
        assert await su.runtime_backends() == []
    assert [d.code for d in sink.items] == ["schema_not_ready"]


async def test_readyz_only_while_running_and_stop_in_order(pg_db: TestDatabase) -> None:
    """Rule: the composition root starts in the ADR's order and stops in reverse:
    ``/readyz`` answers 200 only while the lifecycle runs; when the block is left, admission
    is withdrawn first (``/readyz`` 503 or the listener already closed, never 200) and the
    listener is closed while the scheduler is still draining, then the lifecycle stops, then
    the pools close; the trace records exactly that order and nothing answers afterwards.

    The drain is made observable by holding one round at its claim until the stop has begun:
    from inside that round (the lifecycle still running) the test probes HTTP."""
    await publish_triggers(pg_db, [trigger("t")])
    sink = MemorySink(replica="r")
    config = control_config(pg_db.runtime_dsn, "r", http="127.0.0.1:0")
    seen: dict[str, Any] = {}
    async with open_superuser(pg_db) as su:
        scheduled_for = await su.make_due(["t"])
        async with open_cluster_control(config, sink=sink) as control:
            assert control.http_address is not None
            assert control.app is not None
            port = control.http_address[1]
            assert control.trace == FULL_TRACE[:6]
            await _wait_admitted(su, ["t"], scheduled_for)
            assert (await http_get(port, "/readyz")).status == 200
            assert (await http_get(port, "/healthz")).status == 200

            stop_begun = trio.Event()
            holding = trio.Event()
            app = control.app
            lifecycle = control.lifecycle
            real_stop = lifecycle.stop
            real_claim = control.store.claim

            def stop() -> None:
                seen["ready_when_stop_called"] = app.ready
                seen["trace_when_stop_called"] = list(control.trace)
                real_stop()
                stop_begun.set()

            async def claim(owner: str, limit: int, lease_ms: int) -> list[Claim]:
                if not holding.is_set():
                    holding.set()
                    await stop_begun.wait()
                    seen["readyz_in_drain"] = await http_status(port)

                    async def closed() -> bool:
                        return await http_status(port) is None

                    await wait_until(closed, timeout_s=1.0, what="listener closed")
                    seen["listener_closed_in_drain"] = True
                    seen["lifecycle_stopped_then"] = lifecycle.statistics().stopped
                return await real_claim(owner, limit, lease_ms)

            lifecycle.stop = stop  # type: ignore[method-assign]
            control.store.claim = claim  # type: ignore[method-assign]
            await holding.wait()
        assert control.trace == FULL_TRACE
        assert seen["ready_when_stop_called"] is False
        assert seen["trace_when_stop_called"] == FULL_TRACE[:7]
        assert seen["readyz_in_drain"] in (503, None)
        assert seen["listener_closed_in_drain"] is True
        assert seen["lifecycle_stopped_then"] is False
        assert lifecycle.statistics().stopped
        assert await http_status(port) is None
        assert_exactly_once(await su.occurrence("t", scheduled_for), owner="r")
    assert sink.items == [], [d.code for d in sink.items]


async def test_serve_returns_the_control_and_request_stop_ends_it_in_order(
    pg_db: TestDatabase,
) -> None:
    """Rule: ``await nursery.start(qlsched.serve, config)`` returns the running
    ``ClusterControl``; ``request_stop()`` ends ``serve`` gracefully within the stop
    deadline, in order (HTTP closed before the lifecycle stopped, pools last)."""
    await publish_triggers(pg_db, [trigger("t")])
    config = control_config(pg_db.runtime_dsn, "r", http="127.0.0.1:0")
    async with open_superuser(pg_db) as su:
        scheduled_for = await su.make_due(["t"])
        with trio.fail_after(config.stop_timeout_ms / 1000 + 10):
            async with trio.open_nursery() as nursery:
                control = await nursery.start(qlsched.serve, config)
                assert isinstance(control, qlsched.ClusterControl)
                assert control.lifecycle.statistics().ready
                await _wait_admitted(su, ["t"], scheduled_for)
                assert control.http_address is not None
                port = control.http_address[1]
                assert (await http_get(port, "/readyz")).status == 200
                control.request_stop()
                stop_requested_at = trio.current_time()
            # The nursery ended: serve returned.
            stopped_in_s = trio.current_time() - stop_requested_at
        assert stopped_in_s < config.stop_timeout_ms / 1000
        assert control.trace == FULL_TRACE
        assert control.lifecycle.statistics().stopped
        assert await http_status(port) is None
        assert_exactly_once(await su.occurrence("t", scheduled_for), owner="r")


async def test_metrics_scrape_parses_and_counts_admits(pg_db: TestDatabase) -> None:
    """Rule: ``/metrics`` is valid Prometheus text and counts what the replica did: the
    admits counter and the ``admitted`` outcome equal the Runs this only replica admitted,
    the round counter moves, the due backlog is read from the database (0 once admitted)."""
    ids = ["t0", "t1"]
    await publish_triggers(pg_db, [trigger(i) for i in ids])
    config = control_config(pg_db.runtime_dsn, "r", http="127.0.0.1:0")
    async with open_superuser(pg_db) as su:
        async with open_cluster_control(config) as control:
            assert control.http_address is not None
            port = control.http_address[1]
            await su.wait_initialised(ids)
            for _ in range(2):
                await _wait_admitted(su, ids, await su.make_due(ids))
            await _more_rounds([control], 1)
            response = await http_get(port, "/metrics")
        runs = await su.run_count()
    assert response.status == 200
    text = response.body.decode()
    assert profile_problems(text, "cluster") == []
    samples = {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "profile"))): s.value
        for s in qlsched_samples(text)
    }
    assert runs == 4
    assert samples[("qlsched_admits_total", ())] == runs
    assert samples[("qlsched_outcomes_total", (("code", "admitted"),))] == runs
    assert samples[("qlsched_outcomes_total", (("code", "initialized"),))] == len(ids)
    assert samples[("qlsched_rounds_total", ())] >= 3
    assert samples[("qlsched_due_backlog", ())] == 0
    assert samples[("qlsched_schedule_lag_seconds_count", ())] == runs


async def test_every_series_of_a_replica_is_labelled_profile_cluster(pg_db: TestDatabase) -> None:
    """Rule: every sample of every qlsched family a replica serves on ``/metrics`` carries
    ``profile="cluster"``: the round's, the store's counts, the requests and runs passes'
    and the pruner's (each registers its own families); ``target_info`` says it too."""
    await publish_triggers(pg_db, [trigger("t0")])
    config = control_config(pg_db.runtime_dsn, "r", http="127.0.0.1:0")
    async with open_superuser(pg_db) as su, open_cluster_control(config) as control:
        assert control.http_address is not None
        await su.wait_initialised(["t0"])
        await _wait_admitted(su, ["t0"], await su.make_due(["t0"]))
        response = await http_get(control.http_address[1], "/metrics")
    assert response.status == 200
    text = response.body.decode()
    assert profile_problems(text, "cluster") == []
    assert {
        "qlsched_rounds_total",
        "qlsched_schedule_lag_seconds_bucket",
        "qlsched_due_backlog",
        "qlsched_admit_statements_total",
        "qlsched_schedule_actions_total",
        "qlsched_request_outcomes_total",
        "qlsched_runs_released_total",
        "qlsched_retention_batches_total",
    } <= {s.name for s in qlsched_samples(text)}
    assert 'target_info{profile="cluster"} 1.0' in text


async def test_startup_recovery_marks_drift_and_leaves_pristine_work(
    pg_db: TestDatabase,
) -> None:
    """Rule: startup recovery (before the lifecycle starts) marks a runtime-owned Attempt
    that drifted from the pristine shape (here ``worker_id`` set) with its reason, and
    leaves a pristine queued Attempt to the dispatcher: unmarked and unchanged."""
    ids = ["drifted", "pristine"]
    await publish_triggers(pg_db, [trigger(i) for i in ids])
    async with open_superuser(pg_db) as su:
        scheduled_for = await su.make_due(ids)
        async with open_cluster_control(control_config(pg_db.runtime_dsn, "a")) as first:
            await _wait_admitted(su, ids, scheduled_for)
        assert first.recovery.marked == 0
        drifted = (await su.occurrence("drifted", scheduled_for)).attempts[0]
        pristine = (await su.occurrence("pristine", scheduled_for)).attempts[0]
        await su.execute(
            "UPDATE qlsched.attempts SET worker_id = 'worker-1' WHERE attempt_id = $1",
            drifted["attempt_id"],
        )
        sink = MemorySink(replica="b")
        async with open_cluster_control(
            control_config(pg_db.runtime_dsn, "b"), sink=sink
        ) as second:
            assert second.trace.index("recovered") < second.trace.index("lifecycle_started")
            report = second.recovery
        marks = await su.fetch("SELECT * FROM qlsched.recovery_marks")
        after = (await su.occurrence("pristine", scheduled_for)).attempts[0]
    assert report.marked == 1
    assert [(c.attempt_id, c.reason) for c in report.candidates] == [
        (drifted["attempt_id"], "worker_id")
    ]
    assert [(m["attempt_id"], m["reason"], m["marked_by"]) for m in marks] == [
        (drifted["attempt_id"], "worker_id", "b")
    ]
    assert after == pristine
    assert [(d.code, d.count) for d in sink.items] == [("recovery_marked", 1)]
