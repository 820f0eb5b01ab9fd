"""The COMMIT-response-loss gate (ADR-0105 "Acceptance evidence", docs/contract.md §5
"A COMMIT whose reply is lost") through the real coordinator, on a primary with a
synchronous standby.

A replica reaches the primary through ``tests.support.pgproxy``: on the k-th admit (k drawn
at random, several times) the proxy forwards the Bind, lets the server commit, drops the
whole reply up to ReadyForQuery and resets the client's socket. The replica must report
CommitUnknown and never send that admit again; the committed facts must be on the standby;
after fencing the old primary and promoting the standby, fresh controls' startup recovery
leaves the pristine queued Attempts to the dispatcher and scheduling goes on exactly once.
"""

from __future__ import annotations

import os
import random

import pytest
import trio
import trio_asyncio

from qlsched.cluster.root import open_cluster_control
from tests.support.faults import (
    PROJECT,
    control_config,
    create_gate_db,
    every_second_triggers,
    fetch,
    fetchval,
    ha_pair,
    open_su,
    poll,
    publish_triggers,
    report,
    run_rows,
    seed_cursors,
    server_base_dir,
    verify_end_state,
)
from tests.support.memory_sink import MemorySink
from tests.support.pgproxy import AdmitContext, PgProxy, unix_socket_path

pytestmark = pytest.mark.slow

LOSSES = 3
FIRST_K, LAST_K = 2, 9
TRIGGERS = 3
LOSSY = "lossy"
FRESH = ("fresh-a", "fresh-b")


async def test_lost_commit_reply_is_reported_not_readmitted_and_survives_promotion() -> None:
    """Rule: a COMMIT whose reply is lost is CommitUnknown, never re-sent; exactly once holds.

    For each lost reply (admits number k, random): the replica's sink gets
    ``commit_unknown`` and ``commit_unknown_landed`` for every occurrence of that admit; no
    idempotency key is ever bound in a second admit (no re-admission, not even one the
    unique key would refuse); each lost occurrence has its Run, Attempt and 2 events on the
    standby. After promotion, the fresh controls' recovery finds no candidate
    (``recovery_marks`` stays empty), each lost occurrence still has exactly 1 Run, 1
    Attempt, 2 Events, the schedule moved past it, and the whole window verifies exactly
    once. A re-admit, a silent loss, a recovery mark or a duplicate fails this test.
    """
    seed = int(os.environ.get("QLSCHED_GATE_SEED") or random.randrange(1 << 30))
    ks = sorted(random.Random(seed).sample(range(FIRST_K, LAST_K + 1), LOSSES))
    where = f"(seed {seed}, lost admits {ks})"
    bound: list[list[str]] = []

    async def lose_kth(ctx: AdmitContext) -> None:
        bound.append(ctx.idempotency_keys())
        if ctx.number in ks:
            ctx.lose_reply = True

    with server_base_dir() as base, ha_pair(base) as (primary, standby):
        async with trio_asyncio.open_loop():
            db = await create_gate_db(primary, "gate")
            await publish_triggers(
                db, every_second_triggers(TRIGGERS, policies=[("fire_once", 60_000)])
            )
            async with open_su(db.superuser_dsn) as su_p:
                baseline = await seed_cursors(su_p)

            proxy = PgProxy(unix_socket_path(primary.socket_dir, primary.port), on_admit=lose_kth)
            sink = MemorySink(replica=LOSSY)
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.serve)
                async with open_cluster_control(
                    control_config(proxy.dsn(db.name), LOSSY), sink=sink
                ):

                    async def losses_done() -> bool:
                        return len(proxy.lost) >= LOSSES and proxy.admits > LAST_K

                    await poll(losses_done, timeout_s=30)
                nursery.cancel_scope.cancel()

            assert [lost.number for lost in proxy.lost] == ks, where
            assert not any(lost.error_reply for lost in proxy.lost), where
            lost_keys = [key for lost in proxy.lost for key in lost.keys]
            assert len(lost_keys) == LOSSES * TRIGGERS, where
            every_bound = [key for keys in bound for key in keys]
            assert len(every_bound) == len(set(every_bound)), f"a key bound twice {where}"
            codes = [d.code for d in sink.items]
            assert codes.count("commit_unknown") == len(lost_keys), (
                [(d.code, d.exception, d.sqlstate) for d in sink.items],
                where,
            )
            assert codes.count("commit_unknown_landed") == len(lost_keys), (codes, where)
            assert set(codes) == {"commit_unknown", "commit_unknown_landed"}, (codes, where)
            exceptions = {d.exception for d in sink.items}

            new = await db.replayed_on(standby)
            async with open_su(new.superuser_dsn) as su_s:
                # The committed facts are on the standby (synchronous: flushed before the
                # primary answered the COMMIT that the proxy dropped).
                async def replayed() -> bool:
                    for key in lost_keys:
                        rows = await run_rows(su_s, key)
                        if [(r["attempts"], r["events"]) for r in rows] != [(1, 2)]:
                            return False
                    return True

                await poll(replayed, timeout_s=10, interval_s=0.02)

                await trio.to_thread.run_sync(primary.stop, "immediate")
                assert await fetchval(su_s, "SELECT pg_promote(true, 60)") is True
                await fetch(su_s, "CHECKPOINT")
                assert await fetchval(su_s, "SELECT timeline_id FROM pg_control_checkpoint()") == 2

                sinks = [MemorySink(replica=o) for o in FRESH]
                async with (
                    open_cluster_control(
                        control_config(new.runtime_dsn, FRESH[0]), sink=sinks[0]
                    ) as a,
                    open_cluster_control(
                        control_config(new.runtime_dsn, FRESH[1]), sink=sinks[1]
                    ) as b,
                ):
                    for control in (a, b):
                        assert control.recovery.candidates == []
                        assert control.recovery.marked == 0

                    async def fresh_took_over() -> bool:
                        fresh_runs = await fetchval(
                            su_s,
                            "SELECT count(*) FROM qlsched.runs"
                            " WHERE admitted_by_owner = ANY($1::text[])",
                            list(FRESH),
                        )
                        return bool(fresh_runs >= 3 * TRIGGERS)

                    # Let them take the schedule on for a few occurrences.
                    await poll(fresh_took_over, timeout_s=20, interval_s=0.1)
                assert [d for s in sinks for d in s.items] == []
                assert await fetchval(su_s, "SELECT count(*) FROM qlsched.recovery_marks") == 0

                for key in lost_keys:
                    (run,) = await run_rows(su_s, key)
                    assert (run["attempts"], run["events"]) == (1, 2), where
                    assert run["admitted_by_owner"] == LOSSY, where
                    trigger_id = key.split(":")[3]
                    later = await fetchval(
                        su_s,
                        "SELECT count(*) FROM qlsched.runs WHERE project_id = $1"
                        " AND trigger_id = $2 AND scheduled_for_ms > $3",
                        PROJECT,
                        trigger_id,
                        run["scheduled_for_ms"],
                    )
                    assert later >= 1, f"the schedule did not move past {key} {where}"
                claimed = await fetchval(
                    su_s,
                    "SELECT count(*) FROM qlsched.trigger_schedules WHERE claim_token IS NOT NULL",
                )
                assert claimed == 0
                verdict = await verify_end_state(su_s, baseline, owners=(LOSSY, *FRESH))
                assert verdict.problems == [], where
                report(
                    f"commit-loss gate {where}: {len(lost_keys)} occurrences lost their"
                    f" COMMIT reply ({', '.join(sorted(e or '?' for e in exceptions))}), all"
                    f" reported commit_unknown_landed, none re-bound in {len(bound)} admits;"
                    f" replayed on the standby; after promotion 0 recovery marks;"
                    f" {verdict.summary()}"
                )
