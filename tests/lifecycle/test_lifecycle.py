"""The cadence, catch-up, back-off and bounded stop, on a MockClock (no real sleeps).

Every wait is on a probe (an event set by a store hook, ``wait_rounds``, ``wait_stopped``);
virtual time only moves when every task waits, so the times asserted here are exact.
"""

from __future__ import annotations

import io
import itertools

import msgspec
import pytest
import trio
from trio.testing import MockClock

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.lifecycle import Lifecycle
from qlsched.sinks import StreamSink
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

TICK_MS = BASE_MS - 30_000
SECRET = "password=hunter2 host=10.1.2.3"


class Probe:
    """Records when (Trio time) each call of one store method started, and how many overlap."""

    def __init__(self, *, delay_s: float = 0.0, fail_first: int = 0, fail_all: bool = False):
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.fail_all = fail_all
        self.starts: list[float] = []
        self.active = 0
        self.max_active = 0

    async def __call__(self, _: str) -> None:
        self.starts.append(trio.current_time())
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.fail_all or len(self.starts) <= self.fail_first:
                raise ConnectionError(SECRET)
            if self.delay_s:
                await trio.sleep(self.delay_s)
        finally:
            self.active -= 1


def intervals(starts: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(starts)]


def add_due(store: MemoryStore, count: int, *, prefix: str = "t") -> None:
    for i in range(count):
        store.add_trigger("p", f"{prefix}{i:03}", "* * * * *")
        store.set_cursor("p", f"{prefix}{i:03}", TICK_MS)


async def run_until(r: Replica, rounds: int) -> None:
    """Run the lifecycle until ``rounds`` rounds have ended, then stop it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await r.lifecycle.wait_rounds(rounds)
        r.lifecycle.stop()


async def test_rounds_run_on_the_cadence_from_their_start(autojump_clock: MockClock) -> None:
    """The next round starts one cadence after the previous round started, however long
    (below a cadence) that round took."""
    probe = Probe(delay_s=0.3)
    r = make_replica(MemoryStore(mock_now_ms, hook=on("claim", probe)))

    await run_until(r, 5)

    assert intervals(probe.starts) == [1.0] * 4
    assert probe.max_active == 1


async def test_rounds_never_overlap_under_a_slow_round(autojump_clock: MockClock) -> None:
    """A round that overruns the cadence delays the next round (which then starts at once)
    and never runs beside it."""
    probe = Probe(delay_s=2.5)
    r = make_replica(MemoryStore(mock_now_ms, hook=on("claim", probe)))

    await run_until(r, 4)

    assert probe.max_active == 1
    gaps = intervals(probe.starts)
    assert len(gaps) >= 3
    assert set(gaps) == {2.5}


async def test_catch_up_when_the_budget_is_used_up(autojump_clock: MockClock) -> None:
    """A round that claimed its whole budget is followed at once by the next; the first
    round that claims less waits a cadence again (growth off: catch-up budget = budget)."""
    probe = Probe()
    store = MemoryStore(mock_now_ms, hook=on("claim", probe))
    r = make_replica(store, claim_budget=4, catch_up_budget=4)
    add_due(r.store, 10)

    await run_until(r, 4)

    assert probe.starts == [0.0, 0.0, 0.0, 1.0]
    assert [n for m, n in r.store.calls if m == "admit"] == [4, 4, 2]
    assert len(r.store.runs) == 10


async def test_catch_up_rounds_grow_to_the_catch_up_budget(autojump_clock: MockClock) -> None:
    """Rule: each full round doubles the next, up to the catch-up budget, and the first
    round that claims less brings the next back to the claim budget: 45 due rows with a
    budget of 4 growing to 16 go in rounds of 4, 8, 16, 16 and 1, one after the other,
    then the rounds on the cadence claim 4 again."""
    probe = Probe()
    store = MemoryStore(mock_now_ms, hook=on("claim", probe))
    r = make_replica(store, claim_budget=4, catch_up_budget=16)
    add_due(r.store, 45)

    await run_until(r, 7)

    assert [n for m, n in r.store.calls if m == "claim"] == [4, 8, 16, 16, 16, 4, 4]
    assert [n for m, n in r.store.calls if m == "admit"] == [4, 8, 16, 16, 1]
    assert probe.starts == [0.0] * 5 + [1.0, 2.0]
    assert len(r.store.runs) == 45


async def test_no_catch_up_when_every_claim_went_back(autojump_clock: MockClock) -> None:
    """A full round whose claims were all released (here: decided NotDue) does not start the
    next round at once: it would claim the very same rows again."""
    probe = Probe()
    r = make_replica(AheadStore(ahead={"*"}, hook=on("claim", probe)), claim_budget=2)
    add_due(r.store, 2)

    await run_until(r, 3)

    assert probe.starts == [0.0, 1.0, 2.0]
    last = r.lifecycle.statistics().last_round
    assert last is not None
    assert (last.claimed, last.not_due, last.released, last.budget_exhausted) == (2, 2, 2, True)


async def test_the_hard_budget(autojump_clock: MockClock) -> None:
    """No round claims more than the budget (256 at most): 300 due rows take two rounds of
    one claim statement each, the first with limit 256."""
    r = make_replica(claim_budget=256)
    add_due(r.store, 300)

    await run_until(r, 2)

    claims = [n for m, n in r.store.calls if m == "claim"]
    assert claims[:2] == [256, 256]
    assert [n for m, n in r.store.calls if m == "admit"][:2] == [256, 44]
    assert len(r.store.runs) == 300


async def test_stop_deadline_cuts_an_admit_that_never_returns(autojump_clock: MockClock) -> None:
    """On stop, a round stuck in admit gets stop_timeout_ms; at the deadline it is cancelled,
    the lifecycle returns, and the claim is left to expire (nothing written)."""
    in_admit = trio.Event()

    async def hang(_: str) -> None:
        in_admit.set()
        await trio.sleep_forever()

    r = make_replica(MemoryStore(mock_now_ms, hook=on("admit", hang)), stop_timeout_ms=2_000)
    add_due(r.store, 1)

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await in_admit.wait()
        stop_at = trio.current_time()
        r.lifecycle.stop()
        assert r.lifecycle.statistics().stopping
        await r.lifecycle.wait_stopped()
        stopped_at = trio.current_time()

    assert stopped_at - stop_at == pytest.approx(2.0, abs=0.01)
    row = r.store.schedule("p", "t000")
    assert row.claim_owner == "r1"
    assert row.claim_expires_at_ms is not None
    assert row.claim_expires_at_ms > mock_now_ms()
    assert row.next_fire_at_ms == TICK_MS
    assert r.store.runs == {}
    stats = r.lifecycle.statistics()
    assert (stats.running, stats.stopped, stats.ready) == (False, True, False)


async def test_in_flight_admit_finishes_on_stop(autojump_clock: MockClock) -> None:
    """An admit in flight when stop comes may finish within the deadline; the lifecycle
    returns as soon as it has."""
    in_admit = trio.Event()

    async def slow(_: str) -> None:
        in_admit.set()
        await trio.sleep(0.5)

    r = make_replica(MemoryStore(mock_now_ms, hook=on("admit", slow)), stop_timeout_ms=2_000)
    add_due(r.store, 3)

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await in_admit.wait()
        stop_at = trio.current_time()
        r.lifecycle.stop()
        await r.lifecycle.wait_stopped()

    assert trio.current_time() - stop_at == pytest.approx(0.5, abs=0.01)
    assert len(r.store.runs) == 3
    last = r.lifecycle.statistics().last_round
    assert last is not None
    assert last.admitted == 3


async def test_stop_releases_undecided_claims(autojump_clock: MockClock) -> None:
    """Claims not yet decided when stop comes (here: returned by a claim statement still
    running at stop) are released under their fence with the cursor kept, and claiming
    ends: no further claim statement is sent."""
    in_claim = trio.Event()

    async def slow(_: str) -> None:
        in_claim.set()
        await trio.sleep(0.2)

    r = make_replica(MemoryStore(mock_now_ms, hook=on("claim", slow)))
    add_due(r.store, 3)

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await in_claim.wait()
        r.lifecycle.stop()
        await r.lifecycle.wait_stopped()

    assert [m for m, _ in r.store.calls] == ["claim", "release", "release", "release"]
    for i in range(3):
        row = r.store.schedule("p", f"t{i:03}")
        assert (row.next_fire_at_ms, row.claim_token) == (TICK_MS, None)
    last = r.lifecycle.statistics().last_round
    assert last is not None
    assert (last.released_on_stop, last.released, last.fired) == (3, 3, 0)


async def test_stop_cuts_the_cadence_wait(autojump_clock: MockClock) -> None:
    """Stop during the wait between rounds returns at once, without another round."""
    r = make_replica(cadence_ms=60_000, lease_ms=120_000)

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await r.lifecycle.wait_rounds(1)
        await trio.sleep(5)
        stop_at = trio.current_time()
        r.lifecycle.stop()
        await r.lifecycle.wait_stopped()

    assert trio.current_time() == stop_at
    assert [m for m, _ in r.store.calls] == ["claim"]


async def test_stop_before_run(autojump_clock: MockClock) -> None:
    """A lifecycle stopped before it runs returns at once without claiming; it runs once."""
    r = make_replica()
    r.lifecycle.stop()

    await r.lifecycle.run()

    assert r.store.calls == []
    assert r.lifecycle.statistics().stopped
    with pytest.raises(RuntimeError):
        await r.lifecycle.run()


async def test_readiness_follows_the_lifecycle(autojump_clock: MockClock) -> None:
    """Ready only while running and not stopping."""
    r = make_replica()
    readiness = [r.lifecycle.statistics().ready]

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        stats = r.lifecycle.statistics()
        readiness.append(stats.ready)
        assert (stats.running, stats.stopping, stats.stopped) == (True, False, False)
        r.lifecycle.stop()
        stats = r.lifecycle.statistics()
        readiness.append(stats.ready)
        assert (stats.running, stats.stopping, stats.stopped) == (True, True, False)

    readiness.append(r.lifecycle.ready)
    assert readiness == [False, True, False, False]


async def test_a_failing_round_does_not_stop_the_cadence(autojump_clock: MockClock) -> None:
    """A round that raises is reported to the sink (code and class, no message) and the
    cadence goes on; the next successful round resets the failure count."""
    probe = Probe(fail_first=2)
    r = make_replica(MemoryStore(mock_now_ms, hook=on("claim", probe)))
    add_due(r.store, 1)

    await run_until(r, 3)

    stats = r.lifecycle.statistics()
    assert (stats.rounds, stats.round_failures, stats.consecutive_failures) == (3, 2, 0)
    assert [(d.code, d.exception, d.count) for d in r.sink.items] == [
        ("round_failed", "ConnectionError", 1),
        ("round_failed", "ConnectionError", 2),
    ]
    assert len(r.store.runs) == 1
    assert probe.max_active == 1


async def test_repeated_failures_back_off(autojump_clock: MockClock) -> None:
    """Consecutive round failures back off exponentially from the cadence (2, 4, 8, 16 s),
    capped at 30 s; after a success the cadence is back to normal."""
    probe = Probe(fail_all=True)
    r = make_replica(MemoryStore(mock_now_ms, hook=on("claim", probe)))

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await r.lifecycle.wait_rounds(7)
        probe.fail_all = False
        await r.lifecycle.wait_rounds(9)
        r.lifecycle.stop()

    assert intervals(probe.starts) == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 1.0]


async def test_diagnostics_never_carry_exception_messages(autojump_clock: MockClock) -> None:
    """Whatever fails (a round, a claim task, an admit), the diagnostic stream carries codes,
    class names and ids only, never an exception's message."""

    failed: set[str] = set()

    async def explode(method: str) -> None:
        if method in ("claim", "initialize", "admit") and method not in failed:
            failed.add(method)
            raise ValueError(SECRET)

    stream = io.StringIO()
    store = MemoryStore(mock_now_ms, hook=explode)
    sink = StreamSink(stream, replica="r1")
    base = make_replica(store)
    coordinator = Coordinator(store, base.config, sink, base.metrics)
    lifecycle = Lifecycle(coordinator, base.config)
    store.add_trigger("p", "new", "* * * * *")
    add_due(store, 1)

    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        await lifecycle.wait_rounds(4)
        lifecycle.stop()

    lines = stream.getvalue().splitlines()
    codes = [msgspec.json.decode(line)["code"] for line in lines]
    assert codes[0] == "round_failed"
    assert {"round_failed", "claim_task_failed", "admit_error"} <= set(codes)
    assert "hunter2" not in stream.getvalue()
    assert "10.1.2.3" not in stream.getvalue()
    assert all('"exception":"ValueError"' in line for line in lines)


async def test_rounds_keep_going_with_time(autojump_clock: MockClock) -> None:
    """Over a few virtual minutes an every-minute trigger gets exactly one Run per minute,
    each with its own idempotency key."""
    r = make_replica()
    r.store.add_trigger("p", "t", "* * * * *")

    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await trio.sleep(5 * 60)
        r.lifecycle.stop()

    times = sorted(run.scheduled_for_ms for run in r.store.runs.values())
    assert times == [TICK_MS + k * MINUTE_MS for k in range(1, 6)]


@pytest.mark.parametrize(
    ("next_due_in_ms", "interval_s"),
    [(250, 0.252), (5_000, 1.0), (0, 0.01), (None, 1.0)],
)
async def test_a_round_wakes_for_the_next_due_row(
    autojump_clock: MockClock, next_due_in_ms: int | None, interval_s: float
) -> None:
    """Rule: when the store read, with its claim, how long until the next row falls due
    (by the database's clock), the next round starts just after that (2 ms slack) if it is
    sooner than the cadence, never sooner than 10 ms after the last round started, and on
    the cadence otherwise or when the store does not say."""
    probe = Probe()
    store = MemoryStore(mock_now_ms, hook=on("claim", probe))
    if next_due_in_ms is not None:
        store.next_due_in_ms = next_due_in_ms  # type: ignore[attr-defined]
    r = make_replica(store)

    await run_until(r, 4)

    assert intervals(probe.starts) == [interval_s] * 3
