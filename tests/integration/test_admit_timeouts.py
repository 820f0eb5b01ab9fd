"""A batch admit ended by a lock or statement timeout is not a bad row (issue 21).

Real PostgreSQL. Another session holds ``qlsched.runs`` in ACCESS EXCLUSIVE mode; the
store's admit pool runs with a short ``lock_timeout`` (55P03) or ``statement_timeout``
(57014) of its own. The batch statement fails once and admission ends there: no
per-occurrence fallback (which waited again for each row), every occurrence
``retry_exhausted`` with that SQLSTATE, its claim untouched (left to expire), and one
diagnostic whose code names the cause.
"""

from __future__ import annotations

import pytest
import trio

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.fence import Claim
from qlsched.core.outcomes import RetryExhausted
from qlsched.postgres.pool import open_database
from qlsched.postgres.store import ADMIT_SETTINGS, PostgresStore
from tests.integration.adapter_support import (
    LEASE_MS,
    Counts,
    Env,
    fire_for,
    one_project,
)
from tests.support.memory_sink import MemorySink

ROWS = 6
SHORT_MS = 300
ONCE_A_YEAR = "0 0 1 1 *"


@pytest.mark.parametrize(
    ("setting", "state", "code"),
    [
        ("lock_timeout", "55P03", "admit_lock_timeout"),
        ("statement_timeout", "57014", "admit_statement_timeout"),
    ],
)
async def test_a_timed_out_batch_admit_ends_admission_without_a_fallback(
    env: Env, setting: str, state: str, code: str
) -> None:
    """Rule: a batch admit cut by the lock or statement timeout is sent once (no fallback to
    one occurrence at a time), returns ``retry_exhausted`` with that SQLSTATE for every
    occurrence, leaves every claim as it was, and reports one diagnostic naming the cause;
    once the lock goes, the same fires are admitted."""
    await env.publish(one_project(ROWS))
    await env.make_due()
    sink = MemorySink()
    async with open_database(
        env.db.runtime_dsn,
        isolation="serializable",
        settings={**ADMIT_SETTINGS, setting: f"{SHORT_MS}ms"},
    ) as admit_db:
        store = PostgresStore(env.claim_db, admit_db, sink=sink)
        claims = await store.claim("r1", ROWS, LEASE_MS)
        fires = [fire_for(c) for c in claims]
        before = await env.schedules()
        holder = await env.connect()
        await holder.execute("BEGIN")
        await holder.execute("LOCK TABLE qlsched.runs IN ACCESS EXCLUSIVE MODE")
        started = trio.current_time()
        outcomes = await store.admit(fires)
        seconds = trio.current_time() - started
        await holder.execute("ROLLBACK")

        assert outcomes == [
            RetryExhausted(f.claim.project_id, f.claim.trigger_id, attempts=1, sqlstate=state)
            for f in fires
        ]
        assert store.admit_statements == 1
        assert seconds < ROWS * SHORT_MS / 1000
        assert [(d.code, d.sqlstate, d.count) for d in sink.items] == [(code, state, ROWS)]
        assert await env.schedules() == before
        assert await env.counts() == Counts(runs=0, attempts=0, events=0)

        assert {type(o).__name__ for o in await store.admit(fires)} == {"Admitted"}
    assert await env.counts() == Counts(runs=ROWS, attempts=ROWS, events=2 * ROWS)


async def test_a_fire_whose_row_was_locked_is_sent_again_under_its_claim(env: Env) -> None:
    """Rule: when another session holds a due row (``SELECT ... FOR UPDATE``, as a session
    stalled in a transaction does) past the lock timeout, the round's admit of that row comes
    back ``retry_exhausted`` 55P03 with nothing written and its claim as it was; the engine
    holds the Fire and, once the session lets go, sends it again under the same claim (no
    new claim, no lease waited out): one Run, the cursor moved, the claim ended."""
    # Yearly: with an every-minute cron both rows came due again when the test crossed a
    # minute, and the second round claimed them afresh.
    await env.publish(one_project(2, cron=ONCE_A_YEAR))
    await env.make_due()
    async with open_database(
        env.db.runtime_dsn,
        isolation="serializable",
        settings={**ADMIT_SETTINGS, "lock_timeout": f"{SHORT_MS}ms"},
    ) as admit_db:
        store = PostgresStore(env.claim_db, admit_db, sink=env.sink)
        coordinator = Coordinator(store, Config(owner="r1"), env.sink, Metrics())
        holder = await env.connect()
        claim = store.claim

        async def claim_then_lock(owner: str, limit: int, lease_ms: int) -> list[Claim]:
            claims = await claim(owner, limit, lease_ms)
            await holder.execute("BEGIN")
            await holder.execute(
                "SELECT 1 FROM qlsched.trigger_schedules WHERE trigger_id = 't0000' FOR UPDATE"
            )
            return claims

        store.claim = claim_then_lock  # type: ignore[method-assign]
        first = await coordinator.run_round()
        store.claim = claim  # type: ignore[method-assign]
        locked = await env.schedule("p", "t0000")
        await holder.execute("ROLLBACK")
        assert first.held_due_at is not None
        await trio.sleep_until(first.held_due_at)
        second = await coordinator.run_round()

    assert (first.claimed, first.admitted, first.retry_exhausted, first.held_ahead) == (2, 1, 1, 1)
    assert locked["claim_owner"] == "r1"
    assert (second.claimed, second.admitted, second.held_ahead) == (0, 1, 0)
    after = await env.schedule("p", "t0000")
    assert after["claim_owner"] is None
    assert after["next_fire_at_ms"] > locked["next_fire_at_ms"]
    assert await env.runs_by_trigger() == {"t0000": 1, "t0001": 1}
    assert ("admit_lock_timeout", "55P03") in [(d.code, d.sqlstate) for d in env.sink.items]
