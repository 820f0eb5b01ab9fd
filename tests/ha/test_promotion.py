"""The physical promotion gate (ADR-0105 "Acceptance evidence"): a claim survives promotion
as a claim, and is taken over only after it expires by database time.

A primary with a synchronous streaming standby (``synchronous_standby_names='standby1'``,
``synchronous_commit=on``, the standby made by ``pg_basebackup -R``). A 15 s claim taken on
the primary is replayed on the standby; the old primary is fenced (immediate stop) and the
standby promoted (timeline 1 -> 2); two fresh controls on the new primary admit the
occurrence only after the claim's database-time expiry, under claim version 2.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import trio
import trio_asyncio

from qlsched.cluster.root import open_cluster_control
from qlsched.core.keys import idempotency_key
from qlsched.core.specs import TriggerEntry
from qlsched.postgres.pool import open_database
from qlsched.postgres.store import PostgresStore
from tests.support.faults import (
    PROJECT,
    Start,
    control_config,
    create_gate_db,
    db_now_ms,
    fetch,
    fetchval,
    ha_pair,
    open_su,
    publish_triggers,
    report,
    run_rows,
    server_base_dir,
    verify_end_state,
)
from tests.support.memory_sink import MemorySink

pytestmark = pytest.mark.slow

CLAIM_LEASE_MS = 15_000
TRIGGER = "yearly"
FRESH = ("fresh-a", "fresh-b")

_ROW_SQL = (
    "SELECT claim_owner, claim_token, claim_version, claim_expires_at_ms, next_fire_at_ms,"
    " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint AS now_ms"
    " FROM qlsched.trigger_schedules WHERE project_id = $1 AND trigger_id = $2"
)


async def test_claim_replayed_to_standby_is_taken_over_only_after_database_expiry() -> None:
    """Rule: a lease is a database fact, and it survives a physical failover as one.

    The claim taken on the primary is on the standby before promotion (same token, version
    1, >= 14 s left by the standby's own clock, 0 Runs). After fencing the old primary and
    promoting (timeline 1 -> 2), two fresh controls admit nothing while database time is
    below the claim's expiry; then exactly one admits it under claim version 2, and the
    claim is cleared. End state for that scheduled time: 1 queued Run, 1 pristine claimed
    remote_worker Attempt, 2 Events, no duplicates, no recovery marks. A takeover before
    expiry, a claim lost in replay, or a second Run fails this test.
    """
    with server_base_dir() as base, ha_pair(base) as (primary, standby):
        async with trio_asyncio.open_loop():
            db = await create_gate_db(primary, "gate")
            await publish_triggers(
                db,
                [
                    TriggerEntry(
                        project=PROJECT,
                        id=TRIGGER,
                        task="job",
                        cron="0 0 1 1 *",
                        misfire="fire_once",
                        misfire_grace_ms=86_400_000,
                    )
                ],
            )
            async with open_su(db.superuser_dsn) as su_p:
                replication = await fetch(
                    su_p, "SELECT application_name, sync_state FROM pg_stat_replication"
                )
                assert [(r[0], r[1]) for r in replication] == [("standby1", "sync")]
                # Due now: the cursor at this year's occurrence, long past (fire_once fires it
                # once, whatever the grace), set as superuser (no role may move it).
                now = datetime.fromtimestamp(await db_now_ms(su_p) / 1000, UTC)
                scheduled = int(datetime(now.year, 1, 1, tzinfo=UTC).timestamp() * 1000)
                await fetch(
                    su_p,
                    "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $3"
                    " WHERE project_id = $1 AND trigger_id = $2",
                    PROJECT,
                    TRIGGER,
                    scheduled,
                )
                key = idempotency_key(TRIGGER, 1, scheduled)

                # The old primary's replica claims with a 15 s lease; then it is gone.
                async with (
                    open_database(db.runtime_dsn) as claim_db,
                    open_database(db.runtime_dsn, isolation="serializable") as admit_db,
                ):
                    claims = await PostgresStore(claim_db, admit_db).claim(
                        "old-primary", 1, CLAIM_LEASE_MS
                    )
                assert len(claims) == 1
                claim = claims[0]
                assert claim.fence.version == 1
                assert claim.cursor_ms == scheduled
                assert await run_rows(su_p, key) == []

            new = await db.replayed_on(standby)
            async with open_su(new.superuser_dsn) as su_s:
                assert await fetchval(su_s, "SELECT pg_is_in_recovery()") is True
                with trio.fail_after(10):
                    while True:
                        row = (await fetch(su_s, _ROW_SQL, PROJECT, TRIGGER))[0]
                        if row["claim_token"] == claim.fence.token:
                            break
                        await trio.sleep(0.02)
                left_ms = row["claim_expires_at_ms"] - row["now_ms"]
                assert row["claim_owner"] == "old-primary"
                assert row["claim_version"] == 1
                assert row["claim_expires_at_ms"] == claim.fence.expires_at_ms
                assert left_ms >= 14_000, f"only {left_ms} ms left on the standby"
                assert await run_rows(su_s, key) == []
                assert await fetchval(su_s, "SELECT timeline_id FROM pg_control_checkpoint()") == 1

                # Fence the old primary, then promote.
                await trio.to_thread.run_sync(primary.stop, "immediate")
                assert await fetchval(su_s, "SELECT pg_promote(true, 60)") is True
                assert await fetchval(su_s, "SELECT pg_is_in_recovery()") is False
                await fetch(su_s, "CHECKPOINT")
                timeline = await fetchval(su_s, "SELECT timeline_id FROM pg_control_checkpoint()")
                assert timeline == 2

                sinks = [MemorySink(replica=o) for o in FRESH]
                before_expiry = 0
                async with (
                    open_cluster_control(
                        control_config(new.runtime_dsn, FRESH[0]), sink=sinks[0]
                    ) as a,
                    open_cluster_control(
                        control_config(new.runtime_dsn, FRESH[1]), sink=sinks[1]
                    ) as b,
                ):
                    assert a.recovery.candidates == []
                    assert b.recovery.candidates == []
                    with trio.fail_after(CLAIM_LEASE_MS / 1000 + 20):
                        while True:
                            row = (await fetch(su_s, _ROW_SQL, PROJECT, TRIGGER))[0]
                            runs = await run_rows(su_s, key)
                            if row["now_ms"] < claim.fence.expires_at_ms:
                                assert runs == [], "a Run before the claim expired"
                                assert row["claim_token"] == claim.fence.token
                                before_expiry += 1
                            if runs:
                                break
                            await trio.sleep(0.05)
                    rounds = (a.statistics().lifecycle.rounds, b.statistics().lifecycle.rounds)
                # Both controls ran rounds all along while the old claim still held.
                assert before_expiry >= 50
                assert min(rounds) >= 10

                row = (await fetch(su_s, _ROW_SQL, PROJECT, TRIGGER))[0]
                (run,) = await run_rows(su_s, key)
                assert run["queued_at_ms"] >= claim.fence.expires_at_ms
                assert run["admitted_claim_version"] == 2
                assert run["admitted_by_owner"] in FRESH
                assert (run["attempts"], run["events"]) == (1, 2)
                assert row["claim_version"] == 2
                assert row["claim_token"] is None
                assert row["next_fire_at_ms"] > scheduled
                assert await fetchval(su_s, "SELECT count(*) FROM qlsched.recovery_marks") == 0
                verdict = await verify_end_state(
                    su_s, {(PROJECT, TRIGGER): Start(scheduled, 0, 0)}, owners=FRESH
                )
                assert verdict.problems == []
                assert verdict.runs == verdict.expected == 1
                errors = [d for s in sinks for d in s.items]
                assert errors == []
                report(
                    f"promotion gate: {left_ms} ms left on the standby before promotion;"
                    f" timeline 1 -> {timeline}; {before_expiry} polls saw 0 Runs before"
                    f" expiry; admitted {run['queued_at_ms'] - claim.fence.expires_at_ms} ms"
                    f" after expiry by {run['admitted_by_owner']} under claim version"
                    f" {run['admitted_claim_version']}; {verdict.summary()}"
                )
