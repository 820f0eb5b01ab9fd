"""Fires decided ahead (``engine.ahead``) on a MockClock: held until their due time by
Trio's clock, never further ahead than the lookahead, at most two catch-up budgets per
replica, released on stop; and a round that moved cursors reads the next due time again.

``AheadStore`` hands back claims as if taken ``early_ms`` before the row's due time, as a
claim with a lookahead does; the memory store's clock is Trio's.
"""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from qlsched.cluster.lifecycle import MIN_WAKE_S
from qlsched.engine.round import HELD_ROUNDS
from qlsched.engine.stats import RoundStats
from tests.lifecycle.conftest import (
    BASE_MS,
    MINUTE_MS,
    AheadStore,
    Replica,
    make_replica,
    mock_now_ms,
    on,
)
from tests.support.memory_store import MemoryStore

DUE_MS = BASE_MS - 30_000
"""A minute's tick: due at Trio time 0 (the store's clock is half a minute past it)."""


class Times:
    """Trio times at which one store method was called."""

    def __init__(self) -> None:
        self.at: list[float] = []

    async def __call__(self, _: str) -> None:
        self.at.append(trio.current_time())


def add(store: MemoryStore, count: int) -> None:
    for i in range(count):
        store.add_trigger("p", f"t{i:03}", "* * * * *")
        store.set_cursor("p", f"t{i:03}", DUE_MS)


async def rounds(r: Replica, n: int, gauges: list[float | None] | None = None) -> list[RoundStats]:
    """Run ``n`` rounds of the lifecycle, then stop it; each round's stats (and, into
    ``gauges``, ``qlsched_fires_held`` after each round)."""
    seen: list[RoundStats] = []
    real = r.coordinator.run_round

    async def recording(stop: trio.Event | None = None) -> RoundStats:
        stats = await real(stop)
        seen.append(stats)
        if gauges is not None:
            labels = {"profile": "cluster"}
            gauges.append(r.metrics.registry.get_sample_value("qlsched_fires_held", labels))
        return stats

    r.coordinator.run_round = recording  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await r.lifecycle.wait_rounds(n)
        r.lifecycle.stop()
    return seen


async def test_a_fire_claimed_ahead_is_admitted_when_due(autojump_clock: MockClock) -> None:
    """Rule: a claim taken 100 ms before its row is due (lookahead 250 ms) is decided as of
    the due time, held, and admitted by the round that starts at the due time (by the gap
    the database measured), not before; its cursor moves to the next occurrence."""
    admits = Times()
    store = AheadStore(ahead={"*"}, early_ms=100, hook=on("admit", admits))
    r = make_replica(store, lookahead_ms=250)
    add(store, 1)

    held: list[float | None] = []
    first, second = await rounds(r, 2, held)

    assert (first.fired, first.decided_ahead, first.admitted, first.held_ahead) == (1, 1, 0, 1)
    assert held == [1.0, 0.0]
    # Sent at the due time the database measured, by Trio's clock: no slack, no rounding.
    assert first.held_due_at == pytest.approx(0.1)
    assert admits.at == [pytest.approx(0.1)]
    assert (second.admitted, second.held_ahead, second.held_due_at) == (1, 0, None)
    assert len(store.runs) == 1
    assert store.schedule("p", "t000").next_fire_at_ms == DUE_MS + MINUTE_MS


async def test_a_claim_beyond_the_lookahead_is_not_due(autojump_clock: MockClock) -> None:
    """Rule: a claim of a row due later than the lookahead is decided NotDue and released,
    never held (the engine trusts no claim further ahead than its own setting)."""
    store = AheadStore(ahead={"*"}, early_ms=251)
    r = make_replica(store, lookahead_ms=250)
    add(store, 1)

    [first] = await rounds(r, 1)

    assert (first.not_due, first.released, first.decided_ahead, first.fired) == (1, 1, 0, 0)
    assert [m for m, _ in store.calls] == ["claim", "release"]


async def test_lookahead_off_holds_nothing(autojump_clock: MockClock) -> None:
    """Rule: with ``lookahead_ms = 0`` a claim before the due time is NotDue, as before."""
    store = AheadStore(ahead={"*"}, early_ms=1)
    r = make_replica(store, lookahead_ms=0)
    add(store, 1)

    [first] = await rounds(r, 1)

    assert (first.not_due, first.decided_ahead) == (1, 0)


async def test_stop_releases_the_fires_held(autojump_clock: MockClock) -> None:
    """Rule: a replica stopping while it holds Fires decided ahead releases their claims
    under the fence (another replica fires them when due): nothing admitted, the rows free."""
    store = AheadStore(ahead={"*"}, early_ms=200)
    r = make_replica(store, lookahead_ms=250)
    add(store, 3)

    [first] = await rounds(r, 1)

    assert first.decided_ahead == 3
    assert [m for m, _ in store.calls].count("release") == 3
    # The releases show in the metrics, and nothing is held any more.
    sample = r.metrics.registry.get_sample_value
    assert sample("qlsched_fires_held", {"profile": "cluster"}) == 0
    assert sample("qlsched_outcomes_total", {"profile": "cluster", "code": "released"}) == 3
    assert "admit" not in [m for m, _ in store.calls]
    assert not store.runs
    assert all(store.schedule("p", f"t{i:03}").claim_token is None for i in range(3))


async def test_a_replica_holds_at_most_two_catch_up_budgets(autojump_clock: MockClock) -> None:
    """Rule: Fires held ahead take room from ``HELD_ROUNDS`` catch-up budgets: with a budget
    of 4, rounds claim 4 and 4, then nothing until the held Fires are due; at the due time
    they are admitted in batches of half the catch-up budget while the next rows are
    claimed, and every occurrence becomes one Run."""
    claims = Times()
    store = AheadStore(ahead={"*"}, early_ms=200, hook=on("claim", claims))
    r = make_replica(store, claim_budget=4, catch_up_budget=4, lookahead_ms=250)
    add(store, 20)

    seen = await rounds(r, 14)

    assert HELD_ROUNDS == 2
    assert max(s.held_ahead for s in seen) == 8
    sizes = [n for m, n in store.calls if m == "claim"]
    assert [n for n, at in zip(sizes, claims.at, strict=True) if at < 0.2] == [4, 4]
    assert [n for m, n in store.calls if m == "admit"][:4] == [2, 2, 2, 2]
    assert len(store.runs) == 20


async def test_a_round_that_moved_cursors_reads_the_next_due_time_again(
    autojump_clock: MockClock,
) -> None:
    """Rule: with a store that reads the next due time with its claim, a round that moved
    cursors after that read is followed by a round ``MIN_WAKE_S`` later instead of a
    cadence: a moved cursor may be the next due (the next tick, to claim ahead)."""

    class Hinting(MemoryStore):
        next_due_in_ms: int | None = None

    claims = Times()
    store = Hinting(mock_now_ms, hook=on("claim", claims))
    r = make_replica(store, claim_budget=4)
    add(store, 2)

    await rounds(r, 3)

    assert claims.at == [0.0, MIN_WAKE_S, MIN_WAKE_S + 1.0]
