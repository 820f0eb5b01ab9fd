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
