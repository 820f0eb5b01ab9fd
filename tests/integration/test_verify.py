"""The exactly-once verifier (``qlsched.tools.verify``) on a real history, then broken.

One in-process replica schedules two fast triggers for a few seconds; the history it leaves
must verify clean. Then a superuser corrupts it the ways the fault tests must catch - a
second Run for an occurrence, an occurrence whose Run vanished, a malformed Run, a Run at no
occurrence - and the verifier must name each one, and nothing else. The set-based audit
(``qlsched.tools.audit``) must count the same. Control requests: trigger-now and backfill
Runs are accounted to their requests, never flagged, while a real duplicate still is.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from qlsched.admin import backfill, trigger_now
from qlsched.cluster.root import open_cluster_control
from qlsched.core.config import Config
from qlsched.core.requests import Recorded
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.publish import publish
from qlsched.tools.audit import AuditReport, audit_exactly_once
from qlsched.tools.verify import Occurrence, VerifyReport, verify_exactly_once
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

SPEC = PublishFile(
    projects=[ProjectEntry(id="p")],
    tasks=[TaskEntry(project="p", id="t", command="true")],
    triggers=[
        TriggerEntry(project="p", id="every-second", task="t", cron="* * * * * *"),
        TriggerEntry(project="p", id="every-2s", task="t", cron="*/2 * * * * *"),
    ],
)


async def _sql(dsn: str, fn: Callable[[Connection], Awaitable[Any]]) -> Any:
    return await connect_once(dsn, fn)


async def _verify(db: TestDatabase, **kwargs: Any) -> VerifyReport:
    async def fn(conn: Connection) -> VerifyReport:
        return await verify_exactly_once(conn, **kwargs)

    report: VerifyReport = await _sql(db.observer_dsn, fn)
    audit = await _audit(db, **kwargs)
    # The set-based audit counts what the verifier lists.
    assert audit.duplicates == len(report.duplicates), (audit, report)
    assert audit.lost == len(report.lost), (audit, report)
    assert audit.unexpected == len(report.unexpected), (audit, report)
    assert audit.bad_runs == len({p.run_id for p in report.bad_runs}), (audit, report)
    assert audit.bad_attempts == len({p.run_id for p in report.bad_attempts}), (audit, report)
    assert audit.bad_events == len({p.run_id for p in report.bad_events}), (audit, report)
    assert (audit.manual, audit.backfilled) == (report.manual, report.backfilled)
    assert audit.ok == report.ok
    return report


async def _audit(db: TestDatabase, **kwargs: Any) -> AuditReport:
    async def fn(conn: Connection) -> AuditReport:
        return await audit_exactly_once(conn, **kwargs)

    audit: AuditReport = await _sql(db.observer_dsn, fn)
    return audit


async def _schedule_for(
    db: TestDatabase, seconds: float, requests: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Publish SPEC (then record ``requests``) and run one replica for ``seconds``, then
    stop it in order."""

    async def fn(conn: Connection) -> None:
        await publish(conn, SPEC)

    await _sql(db.admin_dsn, fn)
    if requests is not None:
        await requests()
    config = Config(
        dsn=db.runtime_dsn, owner="r1", lease_ms=10_000, cadence_ms=100, stop_timeout_ms=2_000
    )
    async with open_cluster_control(config, sink=MemorySink(replica="r1")):
        await trio.sleep(seconds)


async def _runs(db: TestDatabase, trigger_id: str) -> list[Any]:
    async def fn(conn: Connection) -> list[Any]:
        return list(
            await conn.fetch(
                "SELECT * FROM qlsched.runs WHERE trigger_id = $1 ORDER BY scheduled_for_ms",
                trigger_id,
            )
        )

    rows: list[Any] = await _sql(db.superuser_dsn, fn)
    return rows


async def _copy_run(db: TestDatabase, run: Any, *, scheduled_for_ms: int, key: str) -> uuid.UUID:
    """Insert, as superuser, a well-formed copy of ``run`` (its Attempt and both events) at
    ``scheduled_for_ms`` under ``key``: nothing but the occurrence can be wrong with it."""
    run_id, attempt_id = uuid.uuid4(), uuid.uuid4()

    async def fn(conn: Connection) -> None:
        async with conn.transaction():
            await conn.execute(
                """
                INSERT INTO qlsched.runs
                SELECT $2, project_id, trigger_id, trigger_revision, task_id, task_revision,
                       execution_revision_id, $3::bigint, $4, state, owner, $3::bigint + 5,
                       cancel_requested, $3::bigint + 5, admitted_by_owner,
                       admitted_claim_token, admitted_claim_version
                  FROM qlsched.runs WHERE run_id = $1
                """,
                run["run_id"],
                run_id,
                scheduled_for_ms,
                key,
            )
            await conn.execute(
                "INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind,"
                " state, created_at_ms) VALUES ($1, $2, 1, 'remote_worker', 'claimed', $3)",
                attempt_id,
                run_id,
                scheduled_for_ms,
            )
            for seq, kind in ((1, "run.created"), (2, "run.queued")):
                await conn.execute(
                    "INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)"
                    " VALUES ($1, $2, $3, $4, $5, 'test')",
                    uuid.uuid4(),
                    run_id,
                    seq,
                    kind,
                    scheduled_for_ms,
                )

    await _sql(db.superuser_dsn, fn)
    return run_id


async def _delete_run(db: TestDatabase, run_id: Any) -> None:
    async def fn(conn: Connection) -> None:
        async with conn.transaction():
            for table in ("run_events", "attempts", "runs"):
                await conn.execute(f"DELETE FROM qlsched.{table} WHERE run_id = $1", run_id)  # noqa: S608

    await _sql(db.superuser_dsn, fn)


@pytest.fixture
async def scheduled(pg_db: TestDatabase) -> TestDatabase:
    """A database with a few seconds of real history (>= 4 Runs of every-second)."""
    await _schedule_for(pg_db, 4.5)
    return pg_db


async def test_real_history_verifies_clean(scheduled: TestDatabase) -> None:
    """A replica's own history: no duplicate, nothing lost, every Run well-formed, and every
    occurrence from the first Run to the cursor accounted for."""
    report = await _verify(scheduled)
    assert report.ok, report
    assert report.runs >= 5
    by_id = {t.trigger_id: t for t in report.triggers}
    tick = by_id["every-second"]
    assert tick.occurrences == tick.runs + tick.skipped + tick.coalesced
    assert tick.runs >= 3
    assert tick.first_ms is not None
    assert tick.cursor_ms is not None
    assert tick.cursor_ms - tick.first_ms == tick.occurrences * 1000


async def test_duplicate_occurrence_is_reported(scheduled: TestDatabase) -> None:
    """A second Run for an occurrence, under another idempotency key, is a duplicate."""
    run = (await _runs(scheduled, "every-second"))[1]
    await _copy_run(
        scheduled, run, scheduled_for_ms=run["scheduled_for_ms"], key="not-the-real-key"
    )
    report = await _verify(scheduled)
    assert report.duplicates == [Occurrence("p", "every-second", run["scheduled_for_ms"])]
    assert not report.lost
    # The copy's key is not the one core computes for it: the Run is malformed too.
    assert [p.problem[:15] for p in report.bad_runs] == ["idempotency key"]
    assert not report.ok


async def test_lost_occurrence_is_reported(scheduled: TestDatabase) -> None:
    """An occurrence inside the window whose Run (attempt, events) is gone is lost, unless a
    counter accounts for it (then it reads as skipped by policy)."""
    runs = await _runs(scheduled, "every-second")
    victim = runs[1]  # not the first: the earliest Run opens the window when none is given
    await _delete_run(scheduled, victim["run_id"])
    report = await _verify(scheduled)
    assert report.lost == [Occurrence("p", "every-second", victim["scheduled_for_ms"])]
    assert not report.duplicates
    assert not report.bad_attempts
    assert not report.bad_events
    assert not report.ok

    async def count_as_skipped(conn: Connection) -> None:
        await conn.execute(
            "UPDATE qlsched.trigger_schedules SET skipped_total = skipped_total + 1"
            " WHERE trigger_id = 'every-second'"
        )

    await _sql(scheduled.superuser_dsn, count_as_skipped)
    report = await _verify(scheduled)
    assert report.ok, report
    assert report.skipped == 1


async def test_first_cursor_opens_the_window(scheduled: TestDatabase) -> None:
    """With the first cursor given, losing the very first occurrence is seen too."""
    runs = await _runs(scheduled, "every-second")
    first = runs[0]["scheduled_for_ms"]
    await _delete_run(scheduled, runs[0]["run_id"])
    assert (await _verify(scheduled)).ok  # the window now starts one second later
    report = await _verify(scheduled, first_cursors={("p", "every-second"): first})
    assert report.lost == [Occurrence("p", "every-second", first)]


async def test_malformed_runs_are_reported(scheduled: TestDatabase) -> None:
    """A Run missing an admission event, or with a second Attempt, is malformed."""
    runs = await _runs(scheduled, "every-second")
    no_event, two_attempts = runs[0]["run_id"], runs[1]["run_id"]

    async def corrupt(conn: Connection) -> None:
        await conn.execute("DELETE FROM qlsched.run_events WHERE run_id = $1 AND seq = 2", no_event)
        await conn.execute(
            "INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind,"
            " state, created_at_ms) VALUES ($1, $2, 2, 'remote_worker', 'claimed', 0)",
            uuid.uuid4(),
            two_attempts,
        )

    await _sql(scheduled.superuser_dsn, corrupt)
    report = await _verify(scheduled)
    assert [p.run_id for p in report.bad_events] == [no_event]
    assert [p.run_id for p in report.bad_attempts] == [two_attempts]
    assert not report.duplicates
    assert not report.lost
    assert not report.ok


async def test_run_at_no_occurrence_is_unexpected(scheduled: TestDatabase) -> None:
    """A Run whose scheduled_for is not an occurrence of its cron is unexpected."""
    run = (await _runs(scheduled, "every-2s"))[0]
    odd = run["scheduled_for_ms"] + 1000  # every-2s fires on even seconds only
    await _copy_run(scheduled, run, scheduled_for_ms=odd, key=f"ql3:cron:v1:every-2s:1:{odd}")
    report = await _verify(scheduled)
    assert report.unexpected == [Occurrence("p", "every-2s", odd)]
    assert not report.duplicates
    assert not report.lost
    assert not report.bad_runs
    assert not report.ok


async def _now_ms(db: TestDatabase) -> int:
    async def fn(conn: Connection) -> int:
        return int(
            await conn.fetchval("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        )

    now: int = await _sql(db.superuser_dsn, fn)
    return now


@pytest.fixture
async def requested(pg_db: TestDatabase) -> TestDatabase:
    """A real history with a trigger-now Run of every-second and a backfill of every-2s
    over ten seconds before the replica started (so before its cron window)."""

    async def record() -> None:
        start = await _now_ms(pg_db) // 2000 * 2000 - 19_000  # an odd second: 5 even ones
        manual = await trigger_now(pg_db.admin_dsn, "p/every-second")
        assert isinstance(manual, Recorded), manual
        filled = await backfill(pg_db.admin_dsn, "p/every-2s", start=start, end=start + 10_000)
        assert isinstance(filled, Recorded), filled

    await _schedule_for(pg_db, 4.5, record)
    return pg_db


async def test_request_runs_are_not_flagged(requested: TestDatabase) -> None:
    """A trigger-now Run (its own key, scheduled_for = the request's time) and backfilled
    Runs before the cron window are accounted to their requests: not extra, not duplicate,
    and the backfill does not stretch the window back (no occurrence reads as lost)."""
    report = await _verify(requested)
    assert report.ok, report
    assert report.manual == 1
    assert report.backfilled == 5  # the even seconds inside a 10 s range


async def test_trigger_now_run_at_an_occurrence_is_not_a_duplicate(
    requested: TestDatabase,
) -> None:
    """A trigger-now Run whose request was recorded at the very millisecond of an
    occurrence that cron also admitted is no duplicate: its key is the request's."""
    run = (await _runs(requested, "every-second"))[0]

    async def align(conn: Connection) -> None:
        async with conn.transaction():
            await conn.execute(
                "UPDATE qlsched.control_requests SET created_at_ms = $1 WHERE kind = 'trigger'",
                run["scheduled_for_ms"],
            )
            await conn.execute(
                "UPDATE qlsched.runs SET scheduled_for_ms = $1"
                " WHERE idempotency_key LIKE 'ql3:manual:%'",
                run["scheduled_for_ms"],
            )

    await _sql(requested.superuser_dsn, align)
    report = await _verify(requested)
    assert report.ok, report
    assert report.manual == 1


async def test_duplicate_beside_requests_is_reported(requested: TestDatabase) -> None:
    """Requests do not hide a real duplicate: a second cron-keyed Run of an occurrence, or
    of a backfilled occurrence, is counted; a trigger-now Run with no request is unexpected."""
    run = (await _runs(requested, "every-second"))[-1]
    await _copy_run(
        requested, run, scheduled_for_ms=run["scheduled_for_ms"], key="not-the-real-key"
    )
    filled = (await _runs(requested, "every-2s"))[0]
    await _copy_run(
        requested, filled, scheduled_for_ms=filled["scheduled_for_ms"], key="another-key"
    )
    report = await _verify(requested)
    assert report.duplicates == [
        Occurrence("p", "every-2s", filled["scheduled_for_ms"]),
        Occurrence("p", "every-second", run["scheduled_for_ms"]),
    ]
    assert not report.ok
    stray = f"ql3:manual:v1:every-second:1:{uuid.uuid4()}"
    await _copy_run(requested, run, scheduled_for_ms=run["scheduled_for_ms"] + 1, key=stray)
    report = await _verify(requested)
    assert report.unexpected == [Occurrence("p", "every-second", run["scheduled_for_ms"] + 1)]
