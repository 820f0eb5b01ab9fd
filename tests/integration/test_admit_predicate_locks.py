"""A batch admit's predicate locks stay on pages; never one lock on a whole index (issue
#27 item 2).

Under SERIALIZABLE, PostgreSQL replaces a transaction's page-level SIRead locks on one
relation by a single lock on the relation once they pass ``max_pred_locks_per_relation``
(32 with the defaults). The admit's foreign-key checks (attempts and events -> runs) read
the ``runs_pkey`` leaf page of each new Run: with random ids below the replica's prefix, a
256-Run admit read about one page per Run once the replica's stretch of the index was
large, and every 2-replica burst of the bench showed admits holding a lock on the whole of
``runs_pkey``, which every other admit's inserts then conflict with. Ids that count up
(``qlsched.core.keys``) keep a batch's Runs on one or two leaf pages.
"""

from __future__ import annotations

import pytest

from qlsched.core.outcomes import Admitted
from tests.integration.adapter_support import Env, admit_due_at_cursors, one_project

BATCH = 256
HISTORY_ROUNDS = 48
"""Admits of BATCH before the one inspected: about 12,000 Runs of the replica, a stretch of
runs_pkey well past 32 leaf pages."""
RUNS_PKEY_PAGES_MAX = 4
"""One leaf page, or a few where a page split falls inside the batch."""


async def _admit_round(env: Env, age_ms: int) -> None:
    outcomes = await admit_due_at_cursors(env, BATCH, age_ms=age_ms)
    assert all(isinstance(o, Admitted) for o in outcomes), outcomes[:3]


async def _locks_of_one_admit(env: Env, ids: list[str] | None = None) -> dict[tuple[str, str], int]:
    """The SIRead locks of one more admit round (of ``ids``), kept alive by an older
    serializable transaction that overlaps it."""
    older = await env.connect()
    await older.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
    await older.fetchval("SELECT 1")  # its snapshot: the admit below overlaps it
    await _admit_round(env, age_ms=60_000)
    locks = await env.su(
        "SELECT relation::regclass::text AS rel, locktype, count(*) AS n FROM pg_catalog.pg_locks"
        " WHERE mode = 'SIReadLock' GROUP BY 1, 2 ORDER BY 1, 2"
    )
    await older.execute("ROLLBACK")
    return {(r["rel"], r["locktype"]): r["n"] for r in locks}


async def test_a_batch_admit_never_locks_the_whole_runs_index(env: Env) -> None:
    """Rule: with a large history of the replica's own Runs, one 256-Run admit holds no
    relation-level SIRead lock on any table or index, and at most a few page-level ones on
    ``runs_pkey`` (read while an older serializable transaction keeps the committed
    admit's locks alive)."""
    await env.publish(one_project(BATCH))
    # Each round's cursor a minute earlier than the last: new occurrences, new Runs.
    for i in range(HISTORY_ROUNDS):
        await _admit_round(env, age_ms=(HISTORY_ROUNDS + 2 - i) * 60_000)
    held = await _locks_of_one_admit(env)
    assert not [k for k in held if k[1] == "relation"], held
    assert 0 < held.get(("qlsched.runs_pkey", "page"), 0) <= RUNS_PKEY_PAGES_MAX, held


async def test_statistics_of_near_empty_tables_never_make_an_admit_read_a_whole_one(
    env: Env,
) -> None:
    """Rule: with the Run tables analysed while nearly empty (a new cluster, or an
    autovacuum just after a TRUNCATE: the bench's storm, 500 occurrences/s at 16 replicas)
    and thousands of Runs since, the admit's cached generic plan still reads no whole
    table or index: no relation-level SIRead lock. Each of the overlap statements' joins
    (``cancel_other``'s Runs and Attempts) once walked all of ``attempts`` as a nested
    loop's outer side in every admit, none of them ``cancel_other``."""
    await env.publish(one_project(BATCH))
    for table in ("runs", "attempts", "run_events"):
        await env.su_exec(f"ANALYZE qlsched.{table}")
    for i in range(HISTORY_ROUNDS):
        await _admit_round(env, age_ms=(HISTORY_ROUNDS + 2 - i) * 60_000)
    held = await _locks_of_one_admit(env)
    assert not [k for k in held if k[1] == "relation"], held


@pytest.mark.parametrize("statistics", ["none", "of-the-history", "near-empty"])
async def test_a_cancel_other_admit_never_reads_a_whole_table(env: Env, statistics: str) -> None:
    """Rule: with every trigger ``cancel_other`` (each admit cancels the trigger's Run
    before it: Runs and Attempts updated, events added, so the gate above lets those
    statements run) and 48 of each trigger's Runs behind it, one 256-Run admit holds no
    relation-level SIRead lock, whatever the Run tables' statistics: none (a new cluster),
    taken with that history, or taken while they were nearly empty (the storm above). With
    near-empty statistics the Attempts' update once read all of ``attempts`` and its key
    index; rewritten so that it cannot widen, the unfinished Runs' read then went through
    ``runs_trigger_idx`` to every trigger's whole history (relation locks on ``runs``)."""
    await env.publish(one_project(BATCH, overlap="cancel_other"))
    if statistics == "near-empty":
        for table in ("runs", "attempts", "run_events"):
            await env.su_exec(f"ANALYZE qlsched.{table}")
    for i in range(HISTORY_ROUNDS):
        await _admit_round(env, age_ms=(HISTORY_ROUNDS + 2 - i) * 60_000)
    if statistics == "of-the-history":
        for table in ("runs", "attempts", "run_events"):
            await env.su_exec(f"ANALYZE qlsched.{table}")
    cancelled = await env.su_val("SELECT count(*) FROM qlsched.runs WHERE state = 'cancelled'")
    assert cancelled == (HISTORY_ROUNDS - 1) * BATCH
    held = await _locks_of_one_admit(env)
    assert not [k for k in held if k[1] == "relation"], held
    assert (
        await env.su_val("SELECT count(*) FROM qlsched.runs WHERE state = 'cancelled'")
        == HISTORY_ROUNDS * BATCH
    )
