"""Readiness follows the database, and a stop says whether its deadline cut work (issue 21),
on a MockClock.

A round that fails (the claim raised: an error or a call with no reply) or that lost a
reply (``commit_unknown``) makes the lifecycle not ready until a round goes through again,
so ``/readyz`` answers 503 while the database is unreachable. ``cut_at_deadline`` is set
only when the stop deadline cancelled a round in flight (``qlsched run`` then exits 3).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
from trio.testing import MockClock

from qlsched.cluster.lifecycle import Lifecycle
from qlsched.core.fence import FireRequest
from qlsched.core.outcomes import CommitUnknown, Outcome
from tests.lifecycle.conftest import make_replica, mock_now_ms, on
from tests.support.memory_store import MemoryStore


class ReplyLostOnce(MemoryStore):
    """The first admit's reply is lost: nothing written, every occurrence CommitUnknown."""

    def __init__(self) -> None:
        super().__init__(mock_now_ms)
        self.lost = 0

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        if self.lost == 0:
            self.lost += 1
            return [
                CommitUnknown(f.claim.project_id, f.claim.trigger_id, exception="CallTimeout")
                for f in fires
            ]
        return await super().admit(fires)


def add_every_second(store: MemoryStore, count: int) -> None:
    for i in range(count):
        store.add_trigger("p", f"t{i}", "* * * * * *")


async def test_not_ready_after_a_failed_round_until_a_round_goes_through(
    autojump_clock: MockClock,
) -> None:
    """Rule: a failed round makes the replica not ready; the next round that goes through
    makes it ready again."""
    failures = 0

    async def fail_twice(_: str) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise TimeoutError("no reply")

    r = make_replica(MemoryStore(mock_now_ms, hook=on("claim", fail_twice)))
    seen = []
    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        for rounds in (1, 2, 3):
            await r.lifecycle.wait_rounds(rounds)
            seen.append(r.lifecycle.statistics().ready)
        r.lifecycle.stop()
    assert seen == [False, False, True]


async def test_not_ready_after_a_round_that_lost_a_reply(autojump_clock: MockClock) -> None:
    """Rule: a round whose admit reply was lost (``commit_unknown``: the first sign of a
    silent database) makes the replica not ready until the next round goes through."""
    store = ReplyLostOnce()
    add_every_second(store, 2)
    r = make_replica(store)
    seen = []
    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await r.lifecycle.wait_rounds(2)  # initialise, then the lost admit
        last = r.lifecycle.statistics().last_round
        assert last is not None
        assert last.commit_unknown == 2
        seen.append(r.lifecycle.statistics().ready)
        await r.lifecycle.wait_rounds(3)
        seen.append(r.lifecycle.statistics().ready)
        r.lifecycle.stop()
    assert seen == [False, True]


@pytest.mark.parametrize("cut", [True, False], ids=["admit-hangs", "admit-finishes"])
async def test_cut_at_deadline_says_whether_the_stop_cut_a_round(
    autojump_clock: MockClock, cut: bool
) -> None:
    """Rule: ``cut_at_deadline`` is set when the stop deadline cancelled the round in
    flight, and only then (an admit that finishes within the deadline is a stop in order)."""
    in_admit = trio.Event()

    async def admit(_: str) -> None:
        in_admit.set()
        await trio.sleep(10 if cut else 0.5)

    store = MemoryStore(mock_now_ms, hook=on("admit", admit))
    store.add_trigger("p", "t", "* * * * *")
    store.set_cursor("p", "t", mock_now_ms() - 1000)
    r = make_replica(store, stop_timeout_ms=2_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(r.lifecycle.run)
        await in_admit.wait()
        r.lifecycle.stop()
        await r.lifecycle.wait_stopped()
    assert r.lifecycle.statistics().cut_at_deadline is cut


async def test_not_ready_at_once_while_the_database_does_not_answer(
    autojump_clock: MockClock,
) -> None:
    """Rule: while the database does not answer (``answering`` False: a call got no reply in
    its budget), the replica is not ready at once, whatever its rounds said; when it answers
    again, it is ready again."""
    answering = True
    r = make_replica()
    lifecycle = Lifecycle(r.coordinator, r.config, answering=lambda: answering)
    seen = []
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        await lifecycle.wait_rounds(1)
        seen.append(lifecycle.ready)
        answering = False
        seen.append(lifecycle.statistics().ready)
        answering = True
        seen.append(lifecycle.ready)
        lifecycle.stop()
    assert seen == [True, False, True]
