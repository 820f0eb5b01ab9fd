"""One coordinator round against the memory store, on a MockClock."""

from __future__ import annotations

import uuid

import msgspec
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from trio.testing import MockClock

import qlsched.core.cron as cron_module
import qlsched.core.keys as keys_module
import qlsched.core.spec_cache as spec_cache_module
import qlsched.engine.round as coordinator_module
from qlsched.cluster.coordinator import Coordinator
from qlsched.core.config import ConfigError
from qlsched.core.cron import CronSchedule
from qlsched.engine.stats import RoundStats
from tests.lifecycle.conftest import (
    BASE_MS,
    MINUTE_MS,
    AheadStore,
    make_replica,
    mock_now_ms,
    on,
)
from tests.support.memory_store import MemoryStore

TICK_MS = BASE_MS - 30_000
"""The cron tick (every minute) just before the store's time at Trio time 0."""


def sample(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of ``name`` (of its series with ``labels``, profile aside)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and (labels is None or s.labels == {"profile": "cluster", **labels}):
                return s.value
    raise AssertionError(f"no sample {name} {labels}")


async def test_round_decides_and_writes_each_claim(autojump_clock: MockClock) -> None:
    """A round initialises new rows, fires due ones, skips late ones under 'skip', fires late
    ones once under 'fire_once' (counting the passed-over occurrences) and reports it all."""
    r = make_replica()
    store = r.store
    store.add_trigger("p", "new", "* * * * *")
    store.add_trigger("p", "due", "* * * * *")
    store.set_cursor("p", "due", TICK_MS)
    store.add_trigger("p", "late-skip", "* * * * *")
    store.set_cursor("p", "late-skip", TICK_MS - 10 * MINUTE_MS)
    store.add_trigger("p", "late-once", "* * * * *", misfire_policy="fire_once")
    store.set_cursor("p", "late-once", TICK_MS - 10 * MINUTE_MS)

    stats = await r.coordinator.run_round()

    assert stats == RoundStats(
        budget=16,
        claimed=4,
        fired=2,
        admitted=2,
        initialized=1,
        skipped=1,
        coalesced=10,
        skipped_occurrences=11,
        duration_ms=stats.duration_ms,
    )
    assert sorted(run.scheduled_for_ms for run in store.runs.values()) == [
        TICK_MS - 10 * MINUTE_MS,
        TICK_MS,
    ]
    for name in ("new", "due", "late-skip", "late-once"):
        row = store.schedule("p", name)
        assert row.next_fire_at_ms == TICK_MS + MINUTE_MS
        assert row.claim_token is None
    assert store.schedule("p", "late-skip").skipped_total == 11
    assert store.schedule("p", "late-once").coalesced_total == 10
    assert r.sink.items == []


async def test_one_claim_and_one_admit_call_per_round(autojump_clock: MockClock) -> None:
    """A round makes exactly one claim call (limit = the budget) and admits all its Fires in
    exactly one admit call; a round without Fires makes no admit call."""
    r = make_replica(claim_budget=8)
    for i in range(5):
        r.store.add_trigger("p", f"t{i}", "* * * * *")
        r.store.set_cursor("p", f"t{i}", TICK_MS)

    await r.coordinator.run_round()
    assert [c for c in r.store.calls if c[0] in ("claim", "admit")] == [("claim", 8), ("admit", 5)]

    r.store.calls.clear()
    await r.coordinator.run_round()  # nothing due: the cursors moved to the next tick
    assert r.store.calls == [("claim", 8)]


async def test_ids_are_minted_only_for_fire(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run and Attempt ids are created only for a Fire decision: Initialize, Skip and NotDue
    mint none."""
    minted: list[uuid.UUID] = []
    real_new_id = keys_module.new_id

    def counting_new_id(owner: str | None = None) -> uuid.UUID:
        minted.append(real_new_id(owner))
        return minted[-1]

    monkeypatch.setattr(keys_module, "new_id", counting_new_id)
    store = AheadStore(ahead={"ahead"})
    r = make_replica(store)
    store.add_trigger("p", "new", "* * * * *")
    store.add_trigger("p", "late", "* * * * *")
    store.set_cursor("p", "late", TICK_MS - 10 * MINUTE_MS)
    store.add_trigger("p", "ahead", "* * * * *")
    store.set_cursor("p", "ahead", TICK_MS)

    stats = await r.coordinator.run_round()

    assert (stats.initialized, stats.skipped, stats.not_due, stats.fired) == (1, 1, 1, 0)
    assert minted == []

    store.add_trigger("p", "due", "* * * * *")
    store.set_cursor("p", "due", TICK_MS)
    stats = await r.coordinator.run_round()

    assert stats.fired == stats.admitted == 1
    [run] = store.runs.values()
    assert minted == [run.run_id, store.attempts[0].attempt_id]


async def test_not_due_is_released_with_cursor_kept(autojump_clock: MockClock) -> None:
    """A claim decided NotDue is released under its fence and its cursor kept."""
    store = AheadStore(ahead={"t"})
    r = make_replica(store)
    store.add_trigger("p", "t", "* * * * *")
    store.set_cursor("p", "t", TICK_MS)

    stats = await r.coordinator.run_round()

    assert (stats.not_due, stats.released) == (1, 1)
    row = store.schedule("p", "t")
    assert (row.next_fire_at_ms, row.claim_token) == (TICK_MS, None)


async def test_budget_is_hard_capped(autojump_clock: MockClock) -> None:
    """The claim limit never exceeds 256: no Config above it can be built (not even by
    ``replace``), so the coordinator takes the budget as it is; a round that claims its
    whole budget says so."""
    store = MemoryStore(lambda: BASE_MS)
    for i in range(300):
        store.add_trigger("p", f"t{i:03}", "* * * * *")
    r = make_replica(store)
    with pytest.raises(ConfigError, match=r"claim_budget=257 is out of bounds 1\.\.256"):
        msgspec.structs.replace(r.config, claim_budget=257)
    coordinator = Coordinator(
        store, msgspec.structs.replace(r.config, claim_budget=256), r.sink, r.metrics
    )
    assert coordinator.budget == 256

    stats = await coordinator.run_round()

    assert store.calls[0] == ("claim", 256)
    assert (stats.claimed, stats.initialized, stats.budget_exhausted) == (256, 256, True)
    stats = await coordinator.run_round()
    assert (stats.claimed, stats.budget_exhausted) == (44, False)


async def test_stop_releases_undecided_claims(autojump_clock: MockClock) -> None:
    """When the lifecycle starts stopping while the claim statement runs, every claim it
    returns is released under its fence, undecided; a round entered while stopping claims
    nothing."""
    stop = trio.Event()

    async def stop_during_claim(_: str) -> None:
        stop.set()

    store = MemoryStore(lambda: BASE_MS, hook=on("claim", stop_during_claim))
    r = make_replica(store)
    for name in ("a", "b", "c"):
        store.add_trigger("p", name, "* * * * *")
        store.set_cursor("p", name, TICK_MS)

    stats = await r.coordinator.run_round(stop)

    assert (stats.claimed, stats.released_on_stop, stats.released) == (3, 3, 3)
    assert (stats.fired, stats.stopping) == (0, True)
    assert [c[0] for c in store.calls] == ["claim", "release", "release", "release"]
    for name in ("a", "b", "c"):
        row = store.schedule("p", name)
        assert (row.next_fire_at_ms, row.claim_token) == (TICK_MS, None)

    store.calls.clear()
    stats = await r.coordinator.run_round(stop)
    assert store.calls == []
    assert (stats.claimed, stats.stopping) == (0, True)


async def test_unusable_spec_is_reported_and_left_to_expire(autojump_clock: MockClock) -> None:
    """A claim whose cron or misfire settings cannot be used gets a ``spec_invalid``
    diagnostic and is left to expire (not released, so it cannot take the budget from valid
    rows every round); the other claims of the round go on."""
    r = make_replica()
    store = r.store
    store.add_trigger("p", "bad-cron", "61 * * * *")
    store.add_trigger("p", "bad-policy", "* * * * *", misfire_policy="sometimes")
    store.add_trigger("p", "good", "* * * * *")

    stats = await r.coordinator.run_round()

    assert stats.errors == {"spec_invalid": 2}
    assert (stats.initialized, stats.released) == (1, 0)
    assert sorted((d.code, d.trigger_id, d.exception or "") for d in r.sink.items) == [
        ("spec_invalid", "bad-cron", "CronError"),
        ("spec_invalid", "bad-policy", ""),
    ]
    for name in ("bad-cron", "bad-policy"):
        row = store.schedule("p", name)
        assert (row.claim_owner, row.next_fire_at_ms) == ("r1", None)


async def test_spec_parsed_once_per_revision(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger's cron is parsed once per revision and cached; a new revision is parsed
    again."""
    parsed: list[tuple[str, str]] = []
    real_parse = cron_module.parse_cron

    def counting_parse(expression: str, timezone: str = "UTC", **policy: str) -> CronSchedule:
        parsed.append((expression, timezone))
        return real_parse(expression, timezone, **policy)

    monkeypatch.setattr(spec_cache_module, "parse_cron", counting_parse)
    r = make_replica()
    r.store.add_trigger("p", "t", "* * * * *")

    for _ in range(3):  # initialize, then fire twice, a minute apart
        await r.coordinator.run_round()
        await trio.sleep(60)
    r.store.republish("p", "t", cron="*/2 * * * *")
    await r.coordinator.run_round()

    assert len(r.store.runs) == 2
    assert parsed == [("* * * * *", "UTC"), ("*/2 * * * *", "UTC")]


async def test_claim_task_failure_is_contained(autojump_clock: MockClock) -> None:
    """An exception in one claim's task is reported (class name only, never the message)
    and the round's other claims are still settled; the failed claim is left to expire."""

    async def explode(_: str) -> None:
        raise RuntimeError("password=hunter2 dsn=postgresql://u:hunter2@db/q")

    store = MemoryStore(lambda: BASE_MS, hook=on("initialize", explode))
    r = make_replica(store)
    store.add_trigger("p", "new", "* * * * *")
    store.add_trigger("p", "due", "* * * * *")
    store.set_cursor("p", "due", TICK_MS)

    stats = await r.coordinator.run_round()

    assert (stats.errors, stats.admitted) == ({"claim_task_failed": 1}, 1)
    [diagnostic] = r.sink.items
    assert (diagnostic.code, diagnostic.exception, diagnostic.trigger_id) == (
        "claim_task_failed",
        "RuntimeError",
        "new",
    )
    assert b"hunter2" not in msgspec.json.encode(r.sink.items)
    assert store.schedule("p", "new").claim_owner == "r1"


async def test_admit_failure_is_contained(autojump_clock: MockClock) -> None:
    """An exception from the batch admit is reported once and the round still returns its
    stats; the Fires' claims are left to expire."""

    async def explode(_: str) -> None:
        raise OSError("connection to 10.0.0.7 lost")

    store = MemoryStore(lambda: BASE_MS, hook=on("admit", explode))
    r = make_replica(store)
    store.add_trigger("p", "due", "* * * * *")
    store.set_cursor("p", "due", TICK_MS)

    stats = await r.coordinator.run_round()

    assert (stats.fired, stats.admitted, stats.errors) == (1, 0, {"admit_error": 1})
    assert [(d.code, d.exception, d.count) for d in r.sink.items] == [("admit_error", "OSError", 1)]
    assert store.schedule("p", "due").claim_owner == "r1"


async def test_store_outcomes_are_counted_and_reported(autojump_clock: MockClock) -> None:
    """Lost fences are counted by part (a race, not reported); a digest that does not verify
    is counted and reported, admits nothing and leaves the claim to expire."""
    holder: list[MemoryStore] = []

    async def expire_one(_: str) -> None:
        holder[0].expire_claim("p", "raced")

    store = MemoryStore(lambda: BASE_MS, hook=on("admit", expire_one))
    holder.append(store)
    r = make_replica(store)
    for name in ("raced", "corrupt", "fine"):
        store.add_trigger("p", name, "* * * * *")
        store.set_cursor("p", name, TICK_MS)
    store.corrupt_execution("p", "corrupt")

    stats = await r.coordinator.run_round()

    assert stats.fence_lost == {"expiry": 1}
    assert stats.races_lost == 1
    assert (stats.digest_invalid, stats.admitted) == (1, 1)
    assert [(d.code, d.trigger_id) for d in r.sink.items] == [("digest_invalid", "corrupt")]
    assert [run.trigger_id for run in store.runs.values()] == ["fine"]
    assert store.schedule("p", "corrupt").claim_owner == "r1"


async def test_round_is_recorded_in_metrics(autojump_clock: MockClock) -> None:
    """Each round adds its claims, admits, outcomes, skips and coalesced counts, one lag
    sample per admitted Run (admitted_at - scheduled_for) and its duration to the metrics."""
    r = make_replica()
    store = r.store
    store.add_trigger("p", "due", "* * * * *")
    store.set_cursor("p", "due", TICK_MS)
    store.add_trigger("p", "late", "* * * * *")
    store.set_cursor("p", "late", TICK_MS - 10 * MINUTE_MS)
    store.add_trigger("p", "new", "* * * * *")

    await r.coordinator.run_round()

    text = r.metrics.render().decode()
    assert sample(text, "qlsched_rounds_total") == 1
    assert sample(text, "qlsched_claims_total") == 3
    assert sample(text, "qlsched_admits_total") == 1
    assert sample(text, "qlsched_outcomes_total", {"code": "initialized"}) == 1
    assert sample(text, "qlsched_outcomes_total", {"code": "skipped"}) == 1
    assert sample(text, "qlsched_outcomes_total", {"code": "fence_lost"}) == 0
    assert sample(text, "qlsched_skipped_occurrences_total") == 11
    assert sample(text, "qlsched_schedule_lag_seconds_count") == 1
    assert sample(text, "qlsched_schedule_lag_seconds_sum") == (BASE_MS - TICK_MS) / 1000
    assert sample(text, "qlsched_round_duration_seconds_count") == 1


async def test_a_round_that_outlives_its_lease_lets_go_and_claims_less(
    autojump_clock: MockClock,
) -> None:
    """Rule (issue #14, hole 3): a round whose claim came back after its lease was as good
    as gone sends no admit (every fence would fail on expiry), reports ``lease_overrun``,
    and claims half as many rows next round, doubling back once rounds fit again; the
    occurrence is not lost: the next round admits it under the same key."""
    slow = [True]

    async def slow_first_claim(called: str) -> None:
        if called == "claim" and slow and slow.pop():
            await trio.sleep(31)  # the claim's reply takes longer than the lease

    store = MemoryStore(mock_now_ms, hook=slow_first_claim)
    r = make_replica(store, claim_budget=16)
    store.add_trigger("p", "new", "* * * * *")
    store.add_trigger("p", "due", "* * * * *", misfire_policy="fire_once")
    store.set_cursor("p", "due", TICK_MS)

    first = await r.coordinator.run_round()

    assert (first.claimed, first.fired, first.admitted) == (2, 1, 0)
    assert first.errors == {coordinator_module.LEASE_OVERRUN: 1}
    assert [m for m, _ in store.calls if m == "admit"] == []
    assert r.codes() == [coordinator_module.LEASE_OVERRUN]
    assert not store.runs

    await trio.sleep(31)  # the first round's claims expire
    second = await r.coordinator.run_round()
    assert second.budget == 8
    assert second.admitted == 1
    assert [run.scheduled_for_ms for run in store.runs.values()] == [TICK_MS]
    assert (await r.coordinator.run_round()).budget == 16


async def test_only_a_quick_full_round_grows_the_next(autojump_clock: MockClock) -> None:
    """Rule: a full round doubles the next only when it took under an eighth of the lease
    (here 30 s / 8 = 3.75 s): a full round slowed to 4 s keeps the claim budget, the quick
    ones after it grow 2 -> 4 -> 8 and stop at the catch-up budget."""
    slow = [True]

    async def slow_first_claim(called: str) -> None:
        if called == "claim" and slow and slow.pop():
            await trio.sleep(4)

    store = MemoryStore(mock_now_ms, hook=slow_first_claim)
    r = make_replica(store, claim_budget=2, catch_up_budget=8)
    for i in range(40):
        store.add_trigger("p", f"t{i:02}", "* * * * *", misfire_policy="fire_once")
        store.set_cursor("p", f"t{i:02}", TICK_MS)

    budgets = [(await r.coordinator.run_round()).budget for _ in range(5)]

    assert budgets == [2, 2, 4, 8, 8]
    assert len(store.runs) == 2 + 2 + 4 + 8 + 8


async def test_a_slow_write_of_the_round_does_not_hold_its_admit(
    autojump_clock: MockClock,
) -> None:
    """Rule (issue #26, a large publish stalled every schedule): a round's Fires are
    admitted beside its other writes, not after them, so an Initialize that takes longer
    than the lease delays no Run: the due row is admitted at once, with no lease overrun."""
    slow = [True]

    async def slow_first_initialize(called: str) -> None:
        if called == "initialize" and slow and slow.pop():
            await trio.sleep(31)

    store = MemoryStore(mock_now_ms, hook=slow_first_initialize)
    r = make_replica(store, claim_budget=16)
    store.add_trigger("p", "new", "* * * * *")
    store.add_trigger("p", "due", "* * * * *", misfire_policy="fire_once")
    store.set_cursor("p", "due", TICK_MS)

    first = await r.coordinator.run_round()

    assert (first.claimed, first.fired, first.admitted) == (2, 1, 1)
    assert first.errors == {}
    assert [run.scheduled_for_ms for run in store.runs.values()] == [TICK_MS]
