"""A Fire whose admit waited out the lock timeout (``engine.ahead``) on a MockClock: sent
again ``LOCK_RETRY_S`` later under the same claim, not left to expire; never past its
lease; and Fires held behind a lock-bound batch are not sent into the same lock.

``LockedStore`` answers an admit touching a locked trigger as PostgreSQL does once the
runtime role's ``lock_timeout`` (0.5 s here) cuts the batch: every Fire of that batch
``RetryExhausted`` with SQLSTATE 55P03, nothing written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import pytest
import trio
from trio.testing import MockClock

from qlsched.core.fence import FireRequest
from qlsched.core.outcomes import LOCK_NOT_AVAILABLE, Outcome, RetryExhausted
from qlsched.engine.ahead import LOCK_RETRY_S
from qlsched.engine.stats import RoundStats
from tests.lifecycle.conftest import BASE_MS, AheadStore, Replica, make_replica

LOCK_TIMEOUT_S = 0.5
DUE_MS = BASE_MS - 30_000


class LockedStore(AheadStore):
    """An ``AheadStore`` whose admits of a locked trigger wait the lock timeout and fail."""

    def __init__(self, locked: set[str], until: float, *, early_ms: int | None = None) -> None:
        """``locked`` triggers' rows are held until ``until`` (Trio time); ``early_ms``:
        claims are taken that long ahead (None: when due)."""
        super().__init__(ahead=set() if early_ms is None else {"*"}, early_ms=early_ms or 0)
        self.locked = locked
        self.until = until
        self.admits: list[tuple[float, list[str], bool]] = []
        """(Trio time, triggers, lock-bound) per admit call."""
        self.tokens: list[set[uuid.UUID]] = []
        """The claim tokens each admit call sent."""

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        ids = [f.claim.trigger_id for f in fires]
        self.tokens.append({f.claim.fence.token for f in fires})
        if self.locked.intersection(ids) and trio.current_time() < self.until:
            self.admits.append((trio.current_time(), ids, True))
            await trio.sleep(LOCK_TIMEOUT_S)
            return [
                RetryExhausted(
                    f.claim.project_id, f.claim.trigger_id, attempts=1, sqlstate=LOCK_NOT_AVAILABLE
                )
                for f in fires
            ]
        self.admits.append((trio.current_time(), ids, False))
        return await super().admit(fires)


def add(store: LockedStore, count: int) -> None:
    for i in range(count):
        store.add_trigger("p", f"t{i:03}", "* * * * *")
        store.set_cursor("p", f"t{i:03}", DUE_MS)


async def run_until(r: Replica, done: Callable[[], bool]) -> list[RoundStats]:
    """Run the lifecycle until ``done()`` holds after a round, then stop it."""
    seen: list[RoundStats] = []
    real = r.coordinator.run_round
    finished = trio.Event()

    async def recording(stop: trio.Event | None = None) -> RoundStats:
        stats = await real(stop)
        seen.append(stats)
        if done():
            finished.set()
        return stats

    r.coordinator.run_round = recording  # type: ignore[method-assign]
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            await nursery.start(r.lifecycle.run)
            await finished.wait()
            r.lifecycle.stop()
    return seen


async def test_a_fire_whose_admit_waited_out_the_lock_is_sent_again_soon(
    autojump_clock: MockClock,
) -> None:
    """Rule: a Fire whose admit came back with a lock timeout is held and sent again
    ``LOCK_RETRY_S`` later under the same claim (no new claim, no lease waited out); once
    the lock is gone it is admitted, one Run."""
    store = LockedStore({"t000"}, until=0.3)
    r = make_replica(store)
    add(store, 1)

    seen = await run_until(r, lambda: bool(store.runs))

    assert [(at, locked) for at, _, locked in store.admits] == [
        (0.0, True),
        (pytest.approx(LOCK_TIMEOUT_S + LOCK_RETRY_S), False),
    ]
    assert seen[0].retry_exhausted == 1
    assert seen[0].held_ahead == 1
    assert seen[0].held_due_at == pytest.approx(LOCK_TIMEOUT_S + LOCK_RETRY_S)
    claimed = [n for m, n in store.calls if m == "claim"]
    assert sum(s.claimed for s in seen) == 1, claimed
    assert len(store.runs) == 1
    row = store.schedule("p", "t000")
    assert (row.next_fire_at_ms, row.claim_token) == (DUE_MS + 60_000, None)


async def test_a_lock_held_past_the_lease_leaves_the_claim_to_expire(
    autojump_clock: MockClock,
) -> None:
    """Rule: the retries of a lock-bound Fire stop once its lease has no room (a lease
    overrun is reported, nothing else is sent under that claim): each was reported as a
    retry_exhausted outcome, and after the lease the row is claimed afresh and admitted
    once the lock goes."""
    store = LockedStore({"t000"}, until=8.0)
    r = make_replica(store, lease_ms=5_000, idle_in_transaction_timeout_ms=1_000)
    add(store, 1)

    seen = await run_until(r, lambda: bool(store.runs))

    first = store.tokens[0]
    under_first = [a for a, t in zip(store.admits, store.tokens, strict=True) if t == first]
    # Sent every lock timeout plus LOCK_RETRY_S while the lease had room, then no more.
    assert 6 <= len(under_first) <= 9, under_first
    assert all(locked and at < 5.0 for at, _, locked in under_first)
    assert [d.code for d in r.sink.items].count("lease_overrun") >= 1
    bound = [a for a in store.admits if a[2]]
    assert sum(s.retry_exhausted for s in seen) == len(bound)
    # After the first lease the row was claimed afresh (the lock still held), then admitted.
    assert store.admits[-1][2] is False
    assert store.tokens[-1] != first
    assert len(store.runs) == 1


async def test_fires_held_behind_a_lock_bound_batch_wait_for_the_next_round(
    autojump_clock: MockClock,
) -> None:
    """Rule: held Fires are admitted in batches of half the catch-up budget; when a batch
    waits out the lock timeout, the batches after it are held again, not sent into the
    same lock one after the other (which stretched the round by a lock timeout each)."""
    store = LockedStore({f"t{i:03}" for i in range(8)}, until=0.75, early_ms=200)
    r = make_replica(store, claim_budget=4, catch_up_budget=4, lookahead_ms=250)
    add(store, 8)

    seen = await run_until(r, lambda: len(store.runs) >= 8)

    first_at = store.admits[0][0]
    assert [locked for _, _, locked in store.admits] == [True, False, False, False, False]
    assert [at - first_at for at, _, _ in store.admits[1:]] == [
        pytest.approx(LOCK_TIMEOUT_S + LOCK_RETRY_S, abs=0.002)
    ] * 4
    assert max(s.duration_ms for s in seen) == pytest.approx(LOCK_TIMEOUT_S * 1000)
    assert len(store.runs) == 8
