"""Trigger-now and backfill requests: the same behaviour on both profiles (issue #32).

Written only against ``RequestHarness``; ``conftest.py`` runs each test once on the cluster
(PostgreSQL, its ``RequestsPass``) and once on the Edge (one SQLite file, ``EdgeRequests``).
Times come from the store's clock, and every window lies in its past.
"""

from __future__ import annotations

import uuid

from qlsched.core.cron import parse_cron
from qlsched.core.keys import idempotency_key, manual_key
from qlsched.core.outcomes import Admitted, AlreadyAdmitted
from qlsched.core.request_chunks import RequestCrons, request_chunk
from qlsched.core.requests import (
    REQUEST_FAILURES_MAX,
    NotRecorded,
    Recorded,
    RecordResult,
    RequestWaiting,
    backfill_count,
)
from tests.conformance.harness import RequestHarness, RequestRow
from tests.conformance.test_store_conformance import EVERY_MINUTE, LEASE_MS, MINUTE_MS, fire_for
from tests.support.memory_sink import MemorySink


async def minute(harness: RequestHarness) -> int:
    """The store's now, floored to its minute: the next cron decision's occurrence."""
    return await harness.now_ms() // MINUTE_MS * MINUTE_MS


async def with_cursor(harness: RequestHarness, cursor_ms: int, trigger_id: str = "t") -> None:
    """A published every-minute trigger ``p/<trigger_id>`` whose cron cursor is ``cursor_ms``."""
    await harness.add_trigger("p", trigger_id, EVERY_MINUTE)
    await harness.set_cursor("p", trigger_id, cursor_ms)


def recorded(result: RecordResult) -> uuid.UUID:
    assert isinstance(result, Recorded), result
    return result.request_id


def states(rows: list[RequestRow]) -> list[tuple[str, str, int, int]]:
    return [(r.kind, r.state, r.admitted, r.already_admitted) for r in rows]


async def keys(harness: RequestHarness) -> list[str]:
    return [r.idempotency_key for r in await harness.runs()]


def cron_keys(*occurrences: int) -> list[str]:
    return [idempotency_key("t", 1, s) for s in occurrences]


async def test_trigger_now_admits_one_run_under_its_own_key(
    request_harness: RequestHarness,
) -> None:
    """A trigger-now request becomes exactly one Run keyed ``ql3:manual:v1:…`` and scheduled
    for when it was recorded; the cron cursor does not move, and a second pass admits
    nothing more."""
    h = request_harness
    cursor = await minute(h) + 10 * MINUTE_MS
    await with_cursor(h, cursor)
    result = await h.record_trigger_now("p", "t")
    assert isinstance(result, Recorded)

    await h.serve_requests(16)
    await h.serve_requests(16)

    [run] = await h.runs()
    assert run.idempotency_key == manual_key("t", 1, result.request_id)
    assert run.scheduled_for_ms == result.created_at_ms
    assert (run.attempts, run.events) == (1, 2)
    assert states(await h.requests()) == [("trigger", "done", 1, 0)]
    assert (await h.schedule("p", "t")).next_fire_at_ms == cursor


async def test_a_backfill_admits_each_occurrence_once_in_bounded_chunks(
    request_harness: RequestHarness,
) -> None:
    """A backfill's occurrences before the cron cursor become Runs under the cron key cron
    would use, at most the claim budget per pass, each exactly once."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m)
    recorded(await h.record_backfill("p", "t", m - 5 * MINUTE_MS, m - 1))

    progress = []
    for _ in range(4):
        await h.serve_requests(2)
        progress.append(states(await h.requests())[0][1:3])

    assert progress == [("pending", 2), ("pending", 4), ("done", 5), ("done", 5)]
    assert await keys(h) == cron_keys(*(m - i * MINUTE_MS for i in range(5, 0, -1)))
    assert all((r.attempts, r.events) == (1, 2) for r in await h.runs())


async def test_cron_steps_past_a_key_a_backfill_took(request_harness: RequestHarness) -> None:
    """The wedge, as a class: a cron Fire whose occurrence a backfill already admitted (its
    cursor moved back onto it) moves the cursor past it as already admitted, with no second
    Run; the next Fire is admitted as usual."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m)
    recorded(await h.record_backfill("p", "t", m - 3 * MINUTE_MS, m - 1))
    await h.serve_requests(16)
    await h.set_cursor("p", "t", m - 2 * MINUTE_MS)

    [claim] = await h.store.claim("r1", 10, LEASE_MS)
    [taken] = await h.store.admit([fire_for(claim)])

    assert isinstance(taken, AlreadyAdmitted), taken
    assert taken.idempotency_key == cron_keys(m - 2 * MINUTE_MS)[0]
    assert (await h.schedule("p", "t")).next_fire_at_ms == m - MINUTE_MS
    await h.set_cursor("p", "t", m)
    [claim] = await h.store.claim("r1", 10, LEASE_MS)
    [fired] = await h.store.admit([fire_for(claim)])
    assert isinstance(fired, Admitted)
    assert await keys(h) == cron_keys(*(m - i * MINUTE_MS for i in range(3, -1, -1)))


async def test_a_backfill_counts_what_cron_admitted(request_harness: RequestHarness) -> None:
    """An occurrence cron already admitted is counted by the backfill as already admitted,
    never admitted twice: one Run per key, the backfill done with the exact total."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m - 3 * MINUTE_MS)
    [claim] = await h.store.claim("r1", 10, LEASE_MS)
    assert isinstance((await h.store.admit([fire_for(claim)]))[0], Admitted)
    await h.set_cursor("p", "t", m)
    recorded(await h.record_backfill("p", "t", m - 5 * MINUTE_MS, m - 1))

    await h.serve_requests(16)

    assert states(await h.requests()) == [("backfill", "done", 4, 1)]
    assert await keys(h) == cron_keys(*(m - i * MINUTE_MS for i in range(5, 0, -1)))


async def test_a_paused_trigger_holds_its_requests_until_resume(
    request_harness: RequestHarness,
) -> None:
    """Requests recorded while the trigger is paused admit nothing, however often the pass
    runs; after resume they are admitted (the backfill before the new cursor)."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m)
    await h.pause("p", "t")
    recorded(await h.record_trigger_now("p", "t"))
    recorded(await h.record_backfill("p", "t", m - 3 * MINUTE_MS, m - 1))

    for _ in range(3):
        await h.serve_requests(16)
    assert await h.runs() == []
    # Sorted: two requests recorded in one millisecond have no order of their own.
    assert sorted(states(await h.requests())) == [
        ("backfill", "pending", 0, 0),
        ("trigger", "pending", 0, 0),
    ]

    await h.resume("p", "t")
    await h.serve_requests(16)

    assert sorted(states(await h.requests())) == [
        ("backfill", "done", 3, 0),
        ("trigger", "done", 1, 0),
    ]
    assert len(await h.runs()) == 4


async def test_trigger_now_is_never_starved_by_backfills(request_harness: RequestHarness) -> None:
    """Backfills that must wait for the cron cursor take no slot, and those that can
    progress come after trigger-now requests: with a budget of one, a trigger-now recorded
    after four backfills is admitted by the first pass; the next pass moves the oldest
    backfill that can progress, not an older one that waits."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m - 30 * MINUTE_MS)
    waiting, ready = [], []
    for i in range(2):  # after the cursor: they wait for cron
        start = m - (20 - 2 * i) * MINUTE_MS
        waiting.append(recorded(await h.record_backfill("p", "t", start, start + MINUTE_MS)))
    made: list[int] = []
    for i in range(2):  # before it: they can progress
        start = m - (40 + 2 * i) * MINUTE_MS
        result = await h.record_backfill("p", "t", start, start + MINUTE_MS)
        ready.append(recorded(result))
        assert isinstance(result, Recorded)
        made.append(result.created_at_ms)
    now_request = recorded(await h.record_trigger_now("p", "t"))

    await h.serve_requests(1)

    rows = await h.requests()
    assert [(r.state, r.admitted) for r in rows if r.kind == "backfill"] == [("pending", 0)] * 4
    [trigger_now] = [r for r in rows if r.kind == "trigger"]
    assert (trigger_now.request_id, trigger_now.state) == (now_request, "done")
    assert await keys(h) == [manual_key("t", 1, now_request)]

    await h.serve_requests(1)

    # Requests are served oldest first; two recorded in one millisecond are in id order,
    # so the first of the two that can progress is the one older by time, or by id.
    admitted = {r.request_id: r.admitted for r in await h.requests()}
    assert [admitted[w] for w in waiting] == [0, 0]
    assert sorted(admitted[r] for r in ready) == [0, 1]
    if made[0] < made[1]:
        assert [admitted[r] for r in ready] == [1, 0]


async def test_a_chunk_rechecks_the_cron_cursor_at_admit(request_harness: RequestHarness) -> None:
    """A chunk picked before the cron cursor moved back (a resume, a re-initialised row)
    admits nothing at or past the new cursor: the store re-checks it and the backfill
    waits; the next pass admits only what lies before it."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m)
    recorded(await h.record_backfill("p", "t", m - 4 * MINUTE_MS, m - 1))
    batch = await h.request_store.claim("r1", 16, LEASE_MS)
    [chunk] = [request_chunk(c, 16, RequestCrons(MemorySink(), "r1")) for c in batch.claims]
    assert chunk is not None
    assert len(chunk.occurrences) == 4
    await h.set_cursor("p", "t", m - 2 * MINUTE_MS)

    outcome = await h.request_store.admit(chunk)

    assert isinstance(outcome, RequestWaiting), outcome
    assert await h.runs() == []
    await h.serve_requests(16)
    assert await keys(h) == cron_keys(m - 4 * MINUTE_MS, m - 3 * MINUTE_MS)
    assert states(await h.requests()) == [("backfill", "pending", 2, 0)]


async def test_bad_requests_are_refused_before_anything_is_recorded(
    request_harness: RequestHarness,
) -> None:
    """A missing or disabled trigger, a range reaching past now and a range holding more
    than ``max`` occurrences (with the exact count) are refused at once: nothing stored."""
    h = request_harness
    m = await minute(h)
    await with_cursor(h, m)
    await h.add_trigger("p", "off", EVERY_MINUTE, enabled=False)
    now = await h.now_ms()
    count = backfill_count(parse_cron(EVERY_MINUTE), m - 120 * MINUTE_MS, m - 1)

    assert await h.record_trigger_now("p", "nope") == NotRecorded("p", "nope", "trigger_missing")
    assert await h.record_trigger_now("p", "off") == NotRecorded("p", "off", "trigger_disabled")
    future = await h.record_backfill("p", "t", now - MINUTE_MS, now + 3_600_000)
    assert future == NotRecorded("p", "t", "future")
    too_many = await h.record_backfill("p", "t", m - 120 * MINUTE_MS, m - 1, max_occurrences=10)
    assert too_many == NotRecorded("p", "t", "too_many", count=count, max=10)
    assert count == 120
    assert await h.requests() == []


async def test_a_request_failing_again_and_again_is_refused(
    request_harness: RequestHarness,
) -> None:
    """An admit that cannot commit is counted, and at ``REQUEST_FAILURES_MAX`` failures in a
    row the request is refused ``failed_repeatedly``: never retried forever in silence."""
    h = request_harness
    await with_cursor(h, await minute(h) + 10 * MINUTE_MS)
    await h.break_run_inserts("t")
    recorded(await h.record_trigger_now("p", "t"))

    seen = []
    for _ in range(REQUEST_FAILURES_MAX + 1):
        await h.serve_requests(16)
        [row] = await h.requests()
        seen.append((row.state, row.failures, row.refused_reason))

    pending = [("pending", i, None) for i in range(1, REQUEST_FAILURES_MAX)]
    refused = ("refused", REQUEST_FAILURES_MAX, "failed_repeatedly")
    assert seen == [*pending, refused, refused]
    assert await h.runs() == []


async def test_a_request_for_a_republished_trigger_is_refused(
    request_harness: RequestHarness,
) -> None:
    """A request is for the revision current when it was recorded: re-published with a
    change before it is admitted, it is refused ``revision_changed`` and nothing runs."""
    h = request_harness
    await with_cursor(h, await minute(h) + 10 * MINUTE_MS)
    recorded(await h.record_trigger_now("p", "t"))
    await h.republish("p", "t", "*/5 * * * *")

    await h.serve_requests(16)

    [row] = await h.requests()
    assert (row.state, row.refused_reason) == ("refused", "revision_changed")
    assert await h.runs() == []
