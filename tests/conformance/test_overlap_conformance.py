"""The overlap policy and the start deadline: one behaviour on both profiles (issue #29).

Written only against ``OverlapHarness``; ``conftest.py`` runs each test on the cluster
(PostgreSQL: its SERIALIZABLE admit and its ``RunsPass``) and on the Edge (one SQLite file:
the round's transaction and ``EdgeRunsPass``). The test plays the worker (cluster) or the
dispatcher (Edge) that starts and ends Runs. Occurrences lie in the store's past, a minute
apart.
"""

from __future__ import annotations

import trio

from qlsched.core.outcomes import Admitted, Outcome, OverlapSkipped
from qlsched.core.requests import Recorded
from tests.conformance.harness import OverlapHarness, RunState
from tests.conformance.test_store_conformance import LEASE_MS, MINUTE_MS, fire_for

EVERY_MINUTE = "* * * * *"


async def past(h: OverlapHarness, minutes: int) -> int:
    """A minute boundary ``minutes`` before the store's now."""
    return await h.now_ms() // MINUTE_MS * MINUTE_MS - minutes * MINUTE_MS


async def fire_at(h: OverlapHarness, trigger_id: str, occurrence_ms: int) -> Outcome:
    """Cron's admit of one occurrence: the cursor put on it, the row claimed and admitted."""
    await h.set_cursor("p", trigger_id, occurrence_ms)
    claims = []
    for claim in await h.store.claim("r1", 10, LEASE_MS):
        if claim.trigger_id == trigger_id:
            claims.append(claim)
        else:
            await h.store.release(claim)  # another trigger's row: left as it was
    assert [c.cursor_ms for c in claims] == [occurrence_ms]
    [outcome] = await h.store.admit([fire_for(claims[0])])
    return outcome


def states(runs: list[RunState]) -> list[tuple[int, str]]:
    return [(r.scheduled_for_ms, r.state) for r in runs]


async def test_skip_never_admits_beside_an_unfinished_run(
    overlap_harness: OverlapHarness,
) -> None:
    """``skip``: while the trigger's Run is queued or running, its next occurrences move the
    cursor with no Run and are counted; once it ended, the next one is admitted."""
    h = overlap_harness
    await h.add_trigger("p", "t", EVERY_MINUTE, overlap="skip")
    s = await past(h, 30)

    assert isinstance(await fire_at(h, "t", s), Admitted)
    assert isinstance(await fire_at(h, "t", s + MINUTE_MS), OverlapSkipped)
    await h.move_run("t", s, "running")
    assert isinstance(await fire_at(h, "t", s + 2 * MINUTE_MS), OverlapSkipped)
    await h.move_run("t", s, "succeeded")
    assert isinstance(await fire_at(h, "t", s + 3 * MINUTE_MS), Admitted)

    assert states(await h.run_states("t")) == [(s, "succeeded"), (s + 3 * MINUTE_MS, "queued")]
    assert await h.overlap_totals("p", "t") == (2, 0)
    assert (await h.schedule("p", "t")).next_fire_at_ms == s + 4 * MINUTE_MS


async def test_buffer_one_holds_one_and_releases_it_once(overlap_harness: OverlapHarness) -> None:
    """``buffer_one``: the second occurrence is admitted held (``run.held``), the third is
    skipped; a runs pass leaves the held Run while the first is unfinished and releases it
    (``run.released``) once it ended: exactly once, however many passes follow."""
    h = overlap_harness
    await h.add_trigger("p", "t", EVERY_MINUTE, overlap="buffer_one")
    s = await past(h, 30)

    first = await fire_at(h, "t", s)
    second = await fire_at(h, "t", s + MINUTE_MS)
    third = await fire_at(h, "t", s + 2 * MINUTE_MS)

    assert isinstance(first, Admitted)
    assert not first.held
    assert isinstance(second, Admitted)
    assert second.held
    assert isinstance(third, OverlapSkipped)
    await h.runs_pass()
    held = (await h.run_states("t"))[1]
    assert (held.state, held.events) == ("held", ["run.created", "run.held"])

    await h.move_run("t", s, "running")
    await h.runs_pass()
    assert states(await h.run_states("t"))[1] == (s + MINUTE_MS, "held")
    await h.move_run("t", s, "failed")
    await h.runs_pass()
    await h.runs_pass()

    released = (await h.run_states("t"))[1]
    assert released.state == "queued"
    assert released.events == ["run.created", "run.held", "run.released"]
    assert await h.overlap_totals("p", "t") == (1, 0)


async def test_cancel_other_cancels_the_unfinished_runs(overlap_harness: OverlapHarness) -> None:
    """``cancel_other``: each new Run is admitted; a running predecessor is asked to cancel
    (its worker sees it), a queued one is cancelled at once with reason ``overlap``; a Run
    already asked is not asked again."""
    h = overlap_harness
    await h.add_trigger("p", "t", EVERY_MINUTE, overlap="cancel_other")
    s = await past(h, 30)

    assert isinstance(await fire_at(h, "t", s), Admitted)
    await h.move_run("t", s, "running")
    assert isinstance(await fire_at(h, "t", s + MINUTE_MS), Admitted)
    assert isinstance(await fire_at(h, "t", s + 2 * MINUTE_MS), Admitted)

    running, queued, new = await h.run_states("t")
    assert (running.state, running.cancel_requested, running.cancel_reason) == (
        "running",
        True,
        "overlap",
    )
    assert running.events[-1] == "run.cancel_requested"
    assert running.events.count("run.cancel_requested") == 1
    assert (queued.state, queued.cancel_reason) == ("cancelled", "overlap")
    assert queued.events == ["run.created", "run.queued", "run.cancelled"]
    assert (new.state, new.cancel_requested) == ("queued", False)


async def test_the_start_deadline_cancels_only_runs_nobody_started(
    overlap_harness: OverlapHarness,
) -> None:
    """A queued Run nobody started by its deadline is cancelled by a runs pass (reason
    ``start_deadline``, counted), and ``skip`` then admits again; a Run started in time is
    left alone."""
    h = overlap_harness
    await h.add_trigger("p", "late", EVERY_MINUTE, overlap="skip", start_deadline_ms=1)
    await h.add_trigger("p", "started", EVERY_MINUTE, start_deadline_ms=1)
    s = await past(h, 30)
    assert isinstance(await fire_at(h, "started", s), Admitted)
    await h.move_run("started", s, "running")
    assert isinstance(await fire_at(h, "late", s), Admitted)

    with trio.fail_after(10):
        while (await h.run_states("late"))[0].state != "cancelled":
            await trio.sleep(0.01)
            await h.runs_pass()

    [late] = await h.run_states("late")
    assert (late.cancel_reason, late.events[-1]) == ("start_deadline", "run.cancelled")
    assert await h.overlap_totals("p", "late") == (0, 1)
    assert states(await h.run_states("started")) == [(s, "running")]
    assert isinstance(await fire_at(h, "late", s + MINUTE_MS), Admitted)


async def test_requests_follow_the_policy_unless_they_ask_allow(
    overlap_harness: OverlapHarness,
) -> None:
    """A backfill of a ``buffer_one`` trigger with a Run queued fills the one free place
    (held) and counts the rest as overlap-skipped; recorded with ``overlap = allow`` it
    admits every occurrence. Each request accounts for its whole total."""
    h = overlap_harness
    await h.add_trigger("p", "t", EVERY_MINUTE, overlap="buffer_one")
    s = await past(h, 30)
    await h.set_cursor("p", "t", s + 20 * MINUTE_MS)
    assert isinstance(await h.record_trigger_now("p", "t"), Recorded)
    await h.serve_requests(16)
    policy = await h.record_backfill("p", "t", s, s + 3 * MINUTE_MS)
    allow = await h.record_backfill("p", "t", s + 5 * MINUTE_MS, s + 7 * MINUTE_MS, overlap="allow")
    assert isinstance(policy, Recorded)
    assert isinstance(allow, Recorded)

    await h.serve_requests(16)
    await h.serve_requests(16)

    rows = {r.request_id: r for r in await h.requests()}
    assert (rows[policy.request_id].state, rows[policy.request_id].admitted) == ("done", 1)
    assert rows[policy.request_id].overlap_skipped == 3
    assert (rows[allow.request_id].state, rows[allow.request_id].admitted) == ("done", 3)
    assert rows[allow.request_id].overlap_skipped == 0
    by_state = [r.state for r in await h.run_states("t")]
    assert sorted(by_state) == ["held", "queued", "queued", "queued", "queued"]
