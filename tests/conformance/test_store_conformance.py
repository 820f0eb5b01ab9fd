"""The ScheduleStore conformance suite: the protocol's rules, for every store implementation.

Written only against ``StoreHarness`` (see ``harness.py``); ``conftest.py`` runs it once per
registered store. Times come from ``harness.now_ms()`` (the store's clock), never a local
clock, and every assertion tolerates that clock moving on between calls.
"""

from __future__ import annotations

import uuid

import msgspec
import pytest

from qlsched.core.fence import Claim, FireRequest
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.keys import fire_request, idempotency_key
from qlsched.core.outcomes import (
    Admitted,
    FenceLost,
    Fire,
    Initialize,
    Initialized,
    Outcome,
    Released,
    RevisionChanged,
    Skip,
    Skipped,
)
from tests.conformance.harness import StoreHarness

LEASE_MS = 30_000
MINUTE_MS = 60_000
EVERY_MINUTE = "* * * * *"


async def add_due(harness: StoreHarness, project_id: str, trigger_id: str, age_ms: int) -> int:
    """A trigger whose cursor is ``age_ms`` in the past; returns the cursor."""
    await harness.add_trigger(project_id, trigger_id, EVERY_MINUTE)
    cursor = await harness.now_ms() - age_ms
    await harness.set_cursor(project_id, trigger_id, cursor)
    return cursor


def keys_of(claims: list[Claim]) -> list[tuple[str, str]]:
    return [(c.project_id, c.trigger_id) for c in claims]


def fire_for(claim: Claim, *, coalesced: int = 0) -> FireRequest:
    assert claim.cursor_ms is not None
    fire = Fire(
        scheduled_for_ms=claim.cursor_ms, next_ms=claim.cursor_ms + MINUTE_MS, coalesced=coalesced
    )
    return fire_request(claim, fire)


def fenced_part(harness: StoreHarness) -> str:
    """A fence part every store checks: the token under a lease, else the state version."""
    return "token" if harness.leases else "state"


def stale(claim: Claim, part: str) -> Claim:
    """The claim with one fence part no longer matching the row (``expiry`` is done by the
    harness, as only the store's clock can pass it)."""
    fence = claim.fence
    match part:
        case "owner":
            return msgspec.structs.replace(
                claim, fence=msgspec.structs.replace(fence, owner="intruder")
            )
        case "token":
            return msgspec.structs.replace(
                claim, fence=msgspec.structs.replace(fence, token=uuid.uuid4())
            )
        case "version":
            return msgspec.structs.replace(
                claim, fence=msgspec.structs.replace(fence, version=fence.version + 1)
            )
        case "state":
            return msgspec.structs.replace(claim, state_version=claim.state_version + 1)
    raise AssertionError(part)


# --- claim ----------------------------------------------------------------------------------


async def test_claim_order(harness: StoreHarness) -> None:
    """Claims come in ``next_fire_at_ms NULLS FIRST, project_id, trigger_id`` order and only
    due or uninitialised rows are claimed."""
    await harness.add_trigger("p1", "new", EVERY_MINUTE)  # cursor NULL
    await add_due(harness, "p1", "a", 1_000)
    await add_due(harness, "p1", "b", 5_000)
    await add_due(harness, "p0", "z", 1_000)
    await harness.add_trigger("p2", "future", EVERY_MINUTE)
    await harness.set_cursor("p2", "future", await harness.now_ms() + 10 * MINUTE_MS)
    # p0/z and p1/a share a cursor value only if set in the same ms; make the tie explicit.
    row = await harness.schedule("p1", "a")
    await harness.set_cursor("p0", "z", row.next_fire_at_ms)

    claims = await harness.store.claim("r1", 10, LEASE_MS)

    assert keys_of(claims) == [("p1", "new"), ("p1", "b"), ("p0", "z"), ("p1", "a")]


async def test_claim_limit(harness: StoreHarness) -> None:
    """A claim takes at most ``limit`` rows, the first in claim order; with leases the rest
    stay for the next claimer, without (Edge) the next claim reads from the first row again."""
    for i in range(5):
        await add_due(harness, "p", f"t{i}", 10_000 - i)

    first = await harness.store.claim("r1", 2, LEASE_MS)
    second = await harness.store.claim("r2", 10, LEASE_MS)

    assert keys_of(first) == [("p", "t0"), ("p", "t1")]
    rest = [("p", "t2"), ("p", "t3"), ("p", "t4")]
    assert keys_of(second) == (rest if harness.leases else keys_of(first) + rest)


async def test_uninitialised_rows_first(harness: StoreHarness) -> None:
    """An uninitialised row (cursor NULL) is claimed before any due row, however late."""
    await add_due(harness, "a", "late", 86_400_000)
    await harness.add_trigger("z", "new", EVERY_MINUTE)

    claims = await harness.store.claim("r1", 1, LEASE_MS)

    assert keys_of(claims) == [("z", "new")]
    assert claims[0].cursor_ms is None


async def test_claim_writes_the_fence(harness: StoreHarness) -> None:
    """With leases, a claim sets owner, a new token, ``claim_version + 1``, expiry = claim
    time + lease and ``state_version + 1``, and returns exactly that fence, the cursor and
    the spec. Without (Edge), a claim writes nothing and returns the row's state version
    (its compare-and-set fence), the cursor and the spec."""
    cursor = await add_due(harness, "p", "t", 1_000)
    before = await harness.schedule("p", "t")
    t0 = await harness.now_ms()

    [claim] = await harness.store.claim("r1", 10, LEASE_MS)

    t1 = await harness.now_ms()
    after = await harness.schedule("p", "t")
    assert t0 <= claim.claimed_at_ms <= t1
    assert (claim.cron, claim.timezone, claim.misfire_policy) == (EVERY_MINUTE, "UTC", "skip")
    assert claim.misfire_grace_ms == 60_000
    if not harness.leases:
        assert after == before
        assert claim.state_version == before.state_version
        assert claim.cursor_ms == cursor
        assert claim.trigger_revision == before.trigger_revision
        assert claim.fence.owner == "r1"
        return
    assert claim.fence.owner == "r1" == after.claim_owner
    assert claim.fence.token == after.claim_token
    assert claim.fence.version == after.claim_version == before.claim_version + 1
    assert claim.fence.expires_at_ms == after.claim_expires_at_ms
    assert claim.fence.expires_at_ms == claim.claimed_at_ms + LEASE_MS
    assert claim.state_version == after.state_version == before.state_version + 1
    assert claim.cursor_ms == cursor == after.next_fire_at_ms
    assert claim.trigger_revision == after.trigger_revision


async def test_valid_claim_is_never_taken(harness: StoreHarness) -> None:
    """With leases, a row under a claim that has not expired is invisible to every other
    claimer. Without (Edge), a claim hides nothing: two claims read the same row and only
    the first write passes the compare-and-set; the other is refused by the state version."""
    await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    if not harness.leases:
        [again] = await harness.store.claim("r2", 10, LEASE_MS)
        assert (again.cursor_ms, again.state_version) == (claim.cursor_ms, claim.state_version)
        [first] = await harness.store.admit([fire_for(again)])
        [second] = await harness.store.admit([fire_for(claim)])
        assert isinstance(first, Admitted)
        assert second == FenceLost("p", "t", part="state")
        assert len(await harness.runs()) == 1
        return

    assert await harness.store.claim("r2", 10, LEASE_MS) == []
    assert await harness.store.claim("r1", 10, LEASE_MS) == []
    row = await harness.schedule("p", "t")
    assert (row.claim_owner, row.claim_token) == ("r1", claim.fence.token)


async def test_takeover_only_after_expiry(harness: StoreHarness) -> None:
    """Once the claim's expiry has passed (database time), another replica takes the row
    under a new token and ``claim_version + 1``; the old holder's fence is dead. Without
    leases (Edge) nothing expires and there is no takeover: a claim's fence stays good until
    the row's state moves, and expiring a claim changes nothing."""
    await add_due(harness, "p", "t", 1_000)
    if not harness.leases:
        [claim] = await harness.store.claim("r1", 10, LEASE_MS)
        await harness.expire_claim("p", "t")
        [outcome] = await harness.store.admit([fire_for(claim)])
        assert isinstance(outcome, Admitted)
        assert len(await harness.runs()) == 1
        return
    [old] = await harness.store.claim("r1", 10, LEASE_MS)
    assert await harness.store.claim("r2", 10, LEASE_MS) == []

    await harness.expire_claim("p", "t")
    [new] = await harness.store.claim("r2", 10, LEASE_MS)

    assert new.fence.owner == "r2"
    assert new.fence.token != old.fence.token
    assert new.fence.version == old.fence.version + 1
    assert new.cursor_ms == old.cursor_ms
    [outcome] = await harness.store.admit([fire_for(old)])
    assert outcome == FenceLost("p", "t", part="owner")
    assert await harness.runs() == []


async def test_disabled_trigger_is_not_claimed(harness: StoreHarness) -> None:
    """A disabled trigger's row is never claimed, due or not."""
    await harness.add_trigger("p", "off", EVERY_MINUTE, enabled=False)
    await harness.add_trigger("p", "off-due", EVERY_MINUTE, enabled=False)
    await harness.set_cursor("p", "off-due", await harness.now_ms() - 1_000)

    assert await harness.store.claim("r1", 10, LEASE_MS) == []


# --- admit ----------------------------------------------------------------------------------


async def test_admit_fire(harness: StoreHarness) -> None:
    """Admitting a Fire writes one Run with one Attempt and two events, records the fence it
    was admitted under, advances the cursor, counts coalesced occurrences and clears the
    claim, all together."""
    cursor = await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    before = await harness.schedule("p", "t")
    fire = fire_for(claim, coalesced=2)

    [outcome] = await harness.store.admit([fire])

    key = idempotency_key("t", claim.trigger_revision, cursor)
    assert isinstance(outcome, Admitted)
    assert (outcome.run_id, outcome.attempt_id) == (fire.run_id, fire.attempt_id)
    assert outcome.scheduled_for_ms == cursor
    assert outcome.idempotency_key == key == fire.idempotency_key
    assert claim.claimed_at_ms <= outcome.admitted_at_ms <= await harness.now_ms()
    [run] = await harness.runs()
    assert (run.project_id, run.trigger_id, run.trigger_revision) == ("p", "t", 1)
    assert (run.scheduled_for_ms, run.idempotency_key) == (cursor, key)
    assert (run.attempts, run.events) == (1, 2)
    assert run.admitted_by_owner == "r1"
    assert run.admitted_claim_token == claim.fence.token
    assert run.admitted_claim_version == claim.fence.version
    row = await harness.schedule("p", "t")
    assert row.next_fire_at_ms == cursor + MINUTE_MS
    assert row.last_scheduled_at_ms == cursor
    assert row.state_version > before.state_version
    assert (row.claim_owner, row.claim_token, row.claim_expires_at_ms) == (None, None, None)
    assert row.claim_version == before.claim_version
    assert row.coalesced_total == before.coalesced_total + 2


@pytest.mark.parametrize("part", ["owner", "token", "version", "expiry", "state"])
async def test_stale_admit_is_refused_by_part(harness: StoreHarness, part: str) -> None:
    """An admit whose fence fails in one part is refused with FenceLost naming that part
    (checked in the order owner, token, version, expiry, state) and writes nothing. Without
    leases (Edge) only the state version is part of the fence: a claim differing in owner,
    token, claim version or expiry alone is admitted, exactly once."""
    await add_due(harness, "p", "t", 1_000)
    if not harness.leases and part != "state":
        [claim] = await harness.store.claim("r1", 10, LEASE_MS)
        if part == "expiry":
            await harness.expire_claim("p", "t")
        else:
            claim = stale(claim, part)
        [outcome] = await harness.store.admit([fire_for(claim)])
        assert isinstance(outcome, Admitted)
        assert [(r.trigger_id, r.attempts, r.events) for r in await harness.runs()] == [("t", 1, 2)]
        return
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    if part == "expiry":
        await harness.expire_claim("p", "t")
    else:
        claim = stale(claim, part)
    before = await harness.schedule("p", "t")

    [outcome] = await harness.store.admit([fire_for(claim)])

    assert outcome == FenceLost("p", "t", part=part)  # type: ignore[arg-type]
    assert await harness.runs() == []
    assert await harness.schedule("p", "t") == before


@pytest.mark.parametrize("verb", ["initialize", "skip", "release"])
async def test_stale_claim_writes_are_refused(harness: StoreHarness, verb: str) -> None:
    """Initialize, skip and release check the same fence: a stale one writes nothing."""
    await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    part = fenced_part(harness)
    claim = stale(claim, part)
    before = await harness.schedule("p", "t")

    outcome: Outcome
    if verb == "initialize":
        outcome = await harness.store.initialize(
            claim, Initialize(next_ms=claim.claimed_at_ms + MINUTE_MS)
        )
    elif verb == "skip":
        outcome = await harness.store.skip(claim, Skip(next_ms=claim.claimed_at_ms, skipped=1))
    else:
        outcome = await harness.store.release(claim)

    assert outcome == FenceLost("p", "t", part=part)  # type: ignore[arg-type]
    assert await harness.schedule("p", "t") == before


async def test_revision_published_between_claim_and_admit(harness: StoreHarness) -> None:
    """A revision published after the claim kills it: the admit is refused (FenceLost or
    RevisionChanged), no Run is written and the new revision's row stays uninitialised."""
    await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    await harness.republish("p", "t", "*/5 * * * *")

    [outcome] = await harness.store.admit([fire_for(claim)])

    assert isinstance(outcome, FenceLost | RevisionChanged)
    assert await harness.runs() == []
    row = await harness.schedule("p", "t")
    assert row.trigger_revision == claim.trigger_revision + 1
    assert row.next_fire_at_ms is None
    assert row.claim_token is None
    assert row.state_version > claim.state_version
    if harness.leases:
        assert row.claim_version > claim.fence.version


async def test_republish_clears_claim_and_cursor(harness: StoreHarness) -> None:
    """A re-published revision clears cursor and claim and increments state and claim
    versions (the state version alone without leases), so the next claimer initialises it."""
    await add_due(harness, "p", "t", 1_000)
    await harness.store.claim("r1", 10, LEASE_MS)
    before = await harness.schedule("p", "t")

    await harness.republish("p", "t", "*/5 * * * *")

    row = await harness.schedule("p", "t")
    assert (row.next_fire_at_ms, row.claim_owner, row.claim_token) == (None, None, None)
    assert row.state_version > before.state_version
    if harness.leases:
        assert row.claim_version > before.claim_version
    [claim] = await harness.store.claim("r2", 10, LEASE_MS)
    assert (claim.cursor_ms, claim.cron) == (None, "*/5 * * * *")


async def test_batch_admits_the_good_rows_around_a_stale_one(harness: StoreHarness) -> None:
    """In a batch admit, a row whose fence fails is left out with its own outcome and the
    others are admitted; outcomes come in request order."""
    for name in ("a", "b", "c"):
        await add_due(harness, "p", name, 1_000)
    claims = await harness.store.claim("r1", 10, LEASE_MS)
    assert keys_of(claims) == [("p", "a"), ("p", "b"), ("p", "c")]
    b_before = await harness.schedule("p", "b")
    part = fenced_part(harness)
    fires = [fire_for(claims[0]), fire_for(stale(claims[1], part)), fire_for(claims[2])]

    outcomes = await harness.store.admit(fires)

    assert [type(o) for o in outcomes] == [Admitted, FenceLost, Admitted]
    assert outcomes[1] == FenceLost("p", "b", part=part)  # type: ignore[arg-type]
    assert [(r.trigger_id, r.attempts, r.events) for r in await harness.runs()] == [
        ("a", 1, 2),
        ("c", 1, 2),
    ]
    assert await harness.schedule("p", "b") == b_before
    for name in ("a", "c"):
        assert (await harness.schedule("p", name)).claim_token is None


async def test_admit_is_exactly_once_per_occurrence(harness: StoreHarness) -> None:
    """Admitting the same FireRequest twice writes one Run: the second sees a dead fence."""
    await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    fire = fire_for(claim)

    [first] = await harness.store.admit([fire])
    [second] = await harness.store.admit([fire])

    assert isinstance(first, Admitted)
    assert isinstance(second, FenceLost)
    assert len(await harness.runs()) == 1


# --- skip, initialize, release ----------------------------------------------------------------


async def test_skip_advances_cursor_and_counts(harness: StoreHarness) -> None:
    """Skip advances the cursor, adds the skipped occurrences to ``skipped_total``, clears the
    claim and creates no Run."""
    cursor = await add_due(harness, "p", "t", 10 * MINUTE_MS)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    next_ms = cursor + 11 * MINUTE_MS

    outcome = await harness.store.skip(claim, Skip(next_ms=next_ms, skipped=11))

    assert outcome == Skipped("p", "t", next_ms=next_ms, skipped=11)
    row = await harness.schedule("p", "t")
    assert row.next_fire_at_ms == next_ms
    assert row.skipped_total == 11
    assert row.last_scheduled_at_ms is None
    assert row.claim_token is None
    assert row.state_version > claim.state_version
    assert await harness.runs() == []


async def test_initialize_sets_the_cursor(harness: StoreHarness) -> None:
    """Initialize sets the cursor of an uninitialised revision, clears the claim and creates
    no Run; the row is then not due until that time."""
    await harness.add_trigger("p", "t", EVERY_MINUTE)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    assert claim.cursor_ms is None
    next_ms = claim.claimed_at_ms + 10 * MINUTE_MS

    outcome = await harness.store.initialize(claim, Initialize(next_ms=next_ms))

    assert outcome == Initialized("p", "t", next_ms=next_ms)
    row = await harness.schedule("p", "t")
    assert row.next_fire_at_ms == next_ms
    assert row.claim_token is None
    assert row.state_version > claim.state_version
    assert await harness.runs() == []
    assert await harness.store.claim("r1", 10, LEASE_MS) == []


async def test_release_keeps_the_cursor(harness: StoreHarness) -> None:
    """Release clears the claim under its fence and leaves the cursor as it was, so the row
    is claimable again at once."""
    cursor = await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)

    outcome = await harness.store.release(claim)

    assert outcome == Released("p", "t")
    row = await harness.schedule("p", "t")
    assert row.next_fire_at_ms == cursor
    assert row.last_scheduled_at_ms is None
    assert (row.claim_owner, row.claim_token, row.claim_expires_at_ms) == (None, None, None)
    assert await harness.runs() == []
    [again] = await harness.store.claim("r2", 10, LEASE_MS)
    assert again.cursor_ms == cursor
    if harness.leases:
        assert again.fence.version == claim.fence.version + 1


# --- reader ---------------------------------------------------------------------------------


async def test_due_backlog_counts_active_due_rows(harness: StoreHarness) -> None:
    """The backlog counts active rows that are due or uninitialised (both need a round's
    work), claimed or not; future and disabled rows are not counted."""
    await harness.add_trigger("p", "new", EVERY_MINUTE)
    await add_due(harness, "p", "due", 1_000)
    await add_due(harness, "p", "due-claimed", 2_000)
    await harness.store.claim("r1", 2, LEASE_MS)
    await harness.add_trigger("p", "future", EVERY_MINUTE)
    await harness.set_cursor("p", "future", await harness.now_ms() + 10 * MINUTE_MS)
    await harness.add_trigger("p", "off", EVERY_MINUTE, enabled=False)
    await harness.set_cursor("p", "off", await harness.now_ms() - 1_000)

    assert await harness.reader.due_backlog() == 3


async def test_list_schedules(harness: StoreHarness) -> None:
    """The schedule list shows every row in (project_id, trigger_id) order, with its claim
    and the store's time."""
    await add_due(harness, "p", "b", 1_000)
    await harness.add_trigger("p", "a", "*/5 * * * *", timezone="Asia/Shanghai")
    await harness.store.claim("r1", 1, LEASE_MS)
    t0 = await harness.now_ms()

    views = await harness.reader.list_schedules()

    assert [(v.project_id, v.trigger_id) for v in views] == [("p", "a"), ("p", "b")]
    a, b = views
    assert (a.cron, a.timezone, a.active, a.claim_owner) == (
        "*/5 * * * *",
        "Asia/Shanghai",
        True,
        "r1" if harness.leases else None,
    )
    assert b.claim_owner is None
    assert b.now_ms >= t0
    assert [v.trigger_id for v in await harness.reader.list_schedules(limit=1)] == ["a"]


# --- jitter ---------------------------------------------------------------------------------

YEARLY = "0 0 1 1 *"
"""A period of a year: any jitter up to the hour is below it."""
HOUR_MS = 3_600_000


def jitter_h(trigger_id: str, scheduled_for_ms: int) -> int:
    """``h`` of an occurrence of revision 1 of ``p/<trigger_id>`` with an hour of jitter."""
    return jitter_offset_ms("p", trigger_id, 1, scheduled_for_ms, HOUR_MS)


def not_yet_due(trigger_id: str, now_ms: int) -> int:
    """A past occurrence S whose due time S + h is still two minutes ahead of ``now_ms``."""
    s = now_ms - MINUTE_MS
    while s + jitter_h(trigger_id, s) < now_ms + 2 * MINUTE_MS:
        s -= 1
    return s


def just_due(trigger_id: str, now_ms: int) -> int:
    """An occurrence S whose due time S + h lies one to ten minutes before ``now_ms``."""
    s = now_ms - HOUR_MS
    while not now_ms - 10 * MINUTE_MS <= s + jitter_h(trigger_id, s) <= now_ms - MINUTE_MS:
        s += 997
    return s


async def test_jittered_occurrence_is_claimed_at_its_due_time(harness: StoreHarness) -> None:
    """With jitter, a row is due at S + h, h = core.jitter's hash of (project, trigger,
    revision, S) modulo jitter_ms: a passed S whose S + h is ahead is not claimed; one whose
    S + h has passed is, and the claim carries the jitter that gives the same h."""
    await harness.add_trigger("p", "j", YEARLY, jitter_ms=HOUR_MS)
    await harness.set_cursor("p", "j", not_yet_due("j", await harness.now_ms()))

    assert await harness.store.claim("r1", 10, LEASE_MS) == []

    s = just_due("j", await harness.now_ms())
    await harness.set_cursor("p", "j", s)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)

    assert claim.cursor_ms == s
    assert claim.jitter_ms == HOUR_MS
    assert claim.jitter_offset_ms(s) == jitter_h("j", s)


async def test_cursor_writes_keep_the_due_time(harness: StoreHarness) -> None:
    """The store's own cursor writes (initialize, admit) make the new cursor due at its
    S + h: a passed next occurrence whose due time is ahead is not claimed afterwards."""
    await harness.add_trigger("p", "j", YEARLY, jitter_ms=HOUR_MS)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    ahead = not_yet_due("j", await harness.now_ms())

    assert await harness.store.initialize(claim, Initialize(next_ms=ahead)) == Initialized(
        "p", "j", next_ms=ahead
    )
    assert await harness.store.claim("r1", 10, LEASE_MS) == []

    await harness.set_cursor("p", "j", just_due("j", await harness.now_ms()))
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    assert claim.cursor_ms is not None
    ahead = not_yet_due("j", await harness.now_ms())
    fire = Fire(scheduled_for_ms=claim.cursor_ms, next_ms=ahead)
    [outcome] = await harness.store.admit([fire_request(claim, fire)])

    assert isinstance(outcome, Admitted)
    assert (await harness.schedule("p", "j")).next_fire_at_ms == ahead
    assert await harness.store.claim("r1", 10, LEASE_MS) == []


async def test_jitter_zero_is_due_at_the_cursor(harness: StoreHarness) -> None:
    """Without jitter the due time is the cursor itself: a row one millisecond past its
    cursor is claimed."""
    await harness.add_trigger("p", "j", YEARLY)
    await harness.set_cursor("p", "j", await harness.now_ms() - 1)

    [claim] = await harness.store.claim("r1", 10, LEASE_MS)

    assert claim.jitter_ms == 0
    assert claim.jitter is None


# --- schedule control: pause and resume (both profiles, issue #32) ---------------------------


async def test_a_paused_row_is_not_claimed_until_resumed(harness: StoreHarness) -> None:
    """A paused trigger is not claimed however due it is; after a ``skip`` resume it is
    claimed again, at a cursor after the resume (what fell inside the pause never runs)."""
    await add_due(harness, "p", "t", 5 * MINUTE_MS)
    await harness.pause("p", "t")

    assert await harness.store.claim("r1", 10, LEASE_MS) == []

    await harness.resume("p", "t")
    resumed_at = await harness.now_ms()
    row = await harness.schedule("p", "t")
    assert row.next_fire_at_ms is not None
    assert row.next_fire_at_ms > resumed_at - 1_000
    await harness.set_cursor("p", "t", row.next_fire_at_ms - MINUTE_MS)  # due again
    assert keys_of(await harness.store.claim("r1", 10, LEASE_MS)) == [("p", "t")]


async def test_a_claim_taken_before_the_pause_admits_nothing(harness: StoreHarness) -> None:
    """Nothing of a paused trigger is admitted after the pause: a claim taken just before
    it is refused at admit (its fence lost), and no Run exists."""
    await add_due(harness, "p", "t", 1_000)
    [claim] = await harness.store.claim("r1", 10, LEASE_MS)
    await harness.pause("p", "t")

    [outcome] = await harness.store.admit([fire_for(claim)])

    assert isinstance(outcome, FenceLost), outcome
    assert await harness.runs() == []
