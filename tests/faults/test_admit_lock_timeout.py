"""Lock and statement timeouts are not bad rows (issue 21): a lock held on a table the admit
writes, for longer than the lease, never stretches a round past the lease.

The gate database's runtime role waits 0.5 s for a lock (``SHORT_TIMEOUTS``) and the lease
is 3 s. A batch admit ended by the lock timeout (55P03) ends admission for the round with
no per-occurrence fallback (which waited again for each of the round's occurrences, 12 ×
0.5 s here, past the lease); its claims are left to expire, the diagnostic names the cause,
and admission resumes once the lock goes, exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio_asyncio

from qlsched.cluster.coordinator import Coordinator, RoundStats
from qlsched.cluster.root import open_cluster_control
from qlsched.embedded import EmbeddedPostgres, open_embedded
from tests.faults.stop_support import run_count, table_locks, wait_runs
from tests.support.faults import (
    LEASE_MS,
    control_config,
    create_gate_db,
    every_second_triggers,
    open_su,
    publish_triggers,
    report,
    seed_cursors,
    verify_end_state,
)
from tests.support.memory_sink import MemorySink

pytestmark = pytest.mark.slow

TRIGGERS = 12
ADMIT_TABLES = ["runs", "attempts", "run_events", "trigger_schedules"]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


@pytest.mark.parametrize("table", ADMIT_TABLES)
async def test_a_lock_held_past_the_lease_never_stretches_a_round(
    server: EmbeddedPostgres, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: while another session holds ``table`` (one the admit writes) in ACCESS
    EXCLUSIVE mode for longer than the lease, no round takes longer than the lease and no
    batch falls back to one occurrence at a time; the lock timeout is reported by its
    SQLSTATE; when the lock goes admission resumes, and the window is exactly once."""
    durations: list[float] = []
    run_round = Coordinator.run_round

    async def timed(self: Coordinator, stop: trio.Event | None = None) -> RoundStats:
        started = trio.current_time()
        try:
            return await run_round(self, stop)
        finally:
            durations.append(trio.current_time() - started)

    monkeypatch.setattr(Coordinator, "run_round", timed)
    sink = MemorySink(replica="a1")
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, f"lock_{table}")
        await publish_triggers(db, every_second_triggers(TRIGGERS))
        async with open_su(db.superuser_dsn) as su:
            baseline = await seed_cursors(su)
            async with open_cluster_control(control_config(db.runtime_dsn, "a1"), sink=sink):
                await wait_runs(su, TRIGGERS)
                first = len(durations)
                async with table_locks(db.superuser_dsn, [table]):
                    await trio.sleep(LEASE_MS / 1000 + 1.5)
                unlocked_at = trio.current_time()
                before = await run_count(su)
                await wait_runs(su, before + 2 * TRIGGERS, timeout_s=LEASE_MS / 1000 + 15)
                resumed_s = trio.current_time() - unlocked_at
            verdict = await verify_end_state(su, baseline, owners={"a1"})
    assert verdict.problems == []
    # Every round since the lock was taken, including one in flight when it went.
    locked = durations[first:]
    assert locked, "no round ran while the lock was held"
    assert max(locked) <= LEASE_MS / 1000, locked
    codes = [(d.code, d.sqlstate) for d in sink.items]
    assert not [c for c in codes if c[0] == "admit_batch_fallback"], codes
    expected = ("round_failed" if table == "trigger_schedules" else "admit_lock_timeout", "55P03")
    assert expected in codes, codes
    report(
        f"{table} locked {LEASE_MS / 1000 + 1.5:.1f} s: {len(locked)} rounds, longest"
        f" {max(locked):.2f} s (lease {LEASE_MS / 1000:.0f} s); admission resumed"
        f" {resumed_s:.1f} s after the lock went; {verdict.summary()}"
    )
