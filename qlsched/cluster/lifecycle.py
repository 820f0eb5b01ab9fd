"""The cadence: one coordinator round at a time, catch-up, back-off, and a bounded stop.

States: created -> running (``run`` started) -> stopping (``stop()`` called) -> stopped
(``run`` returned). Readiness is ``running and not stopping``, the last round neither
failed nor lost a reply (``commit_unknown``), and the database answers (a call with no reply
within its budget drops readiness at once): a replica that cannot reach its database is not
ready until it answers and a round goes through again.

Invariants:

- Rounds never overlap. One task runs them in sequence; the next round starts one cadence
  after the previous round *started*, so a round that overruns delays the next one and never
  doubles it up. When the store read the next due time with its claim (PostgreSQL does)
  and that comes sooner, the next round starts just after it (at least ``MIN_WAKE_S`` after
  the last one started): a due row waits milliseconds, not up to a cadence. With a
  lookahead the claim reads when the next row enters the lookahead window, and a round that
  holds Fires decided ahead is followed by one at the first held Fire's due time, which
  admits it.
- Catch-up: a round that used its whole claim budget (and did not hand every claim straight
  back) is followed at once by the next, still in sequence.
- Errors escaping a round go to the diagnostic sink and never end the cadence; consecutive
  failures back off exponentially (cadence x 2^n, capped at ``max(30 s, cadence)``), so a
  broken database is never hammered by a busy loop.
- Stop: claiming ends at once (no new round starts; the cadence or back-off wait is cut), the
  round in flight may finish its decisions and admit, claims it had not yet decided are
  released under their fence, and its cancel scope gets the deadline now + ``stop_timeout_ms``.
  Then the Fires held ahead are released under their fence, by the same deadline. At the
  deadline whatever is left is cancelled (those claims are left to expire) and ``run``
  returns; ``statistics().cut_at_deadline`` then says so.

Time: cadence and deadlines use ``trio.current_time()`` (so a MockClock drives them); every
durable time comes from the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import msgspec
import trio

from qlsched.cluster.coordinator import Coordinator
from qlsched.core.config import Config
from qlsched.core.diagnostics import from_exception
from qlsched.engine.stats import RoundStats

MAX_BACKOFF_MS: Final = 30_000
"""Back-off ceiling after repeated round failures (raised to the cadence if that is longer)."""
WAKE_SLACK_S: Final = 0.002
"""Waking for a due row: this much after its due time, so the claim finds it due."""
MIN_WAKE_S: Final = 0.01
"""Waking for a due row: never sooner than this after the last round started."""

_MAX_BACKOFF_EXPONENT: Final = 16

ROUND_FAILED: Final = "round_failed"


class LifecycleStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot for ``/readyz``, ``status`` and tests."""

    rounds: int
    """Rounds ended (successful, failed or cut by the stop deadline)."""
    round_failures: int
    consecutive_failures: int
    running: bool
    stopping: bool
    stopped: bool
    ready: bool
    """``running and not stopping``, the last round neither failed nor lost a reply, and
    the database answers: the replica is scheduling."""
    last_round: RoundStats | None
    cut_at_deadline: bool = False
    """The stop deadline cancelled a round in flight (its claims are left to expire; an
    admit whose reply never came is ``CommitUnknown``)."""


class Lifecycle:
    """Runs a coordinator's rounds on the cadence until stopped.

    Ownership: ``run`` is the only task; it opens the cancel scope of each round and the
    round opens its own nursery, so nothing here stores a nursery. ``stop`` undoes ``run``.
    A Lifecycle runs once.

    Example::

        lifecycle = Lifecycle(coordinator, config)
        async with trio.open_nursery() as nursery:
            await nursery.start(lifecycle.run)
            ...
            lifecycle.stop()  # run returns within stop_timeout_ms
    """

    def __init__(
        self,
        coordinator: Coordinator,
        config: Config,
        *,
        max_backoff_ms: int = MAX_BACKOFF_MS,
        answering: Callable[[], bool] | None = None,
    ) -> None:
        """``answering``: whether the database still replies (a call that got no reply in its
        budget makes it False); readiness drops at once, not when the round ends."""
        self._coordinator = coordinator
        self._sink = coordinator.sink
        self._metrics = coordinator.metrics
        self._owner = config.owner
        self._cadence_s = config.cadence_ms / 1000
        self._stop_timeout_s = config.stop_timeout_ms / 1000
        self._max_backoff_s = max(max_backoff_ms, config.cadence_ms) / 1000
        self._stop = trio.Event()
        self._stop_deadline = math.inf
        """Set by ``stop()``: the round in flight and the release of held Fires end by it."""
        self._stopped = trio.Event()
        self._round_ended = trio.Event()
        self._round_scope: trio.CancelScope | None = None
        self._started = False
        self._running = False
        self._rounds = 0
        self._round_failures = 0
        self._consecutive_failures = 0
        self._last_round: RoundStats | None = None
        self._cut_at_deadline = False
        self._reply_lost = False
        self._answering = answering

    @property
    def ready(self) -> bool:
        return (
            self._running
            and not self._stop.is_set()
            and not self._consecutive_failures
            and not self._reply_lost
            and (self._answering is None or self._answering())
        )

    def statistics(self) -> LifecycleStatistics:
        return LifecycleStatistics(
            rounds=self._rounds,
            round_failures=self._round_failures,
            consecutive_failures=self._consecutive_failures,
            running=self._running,
            stopping=self._stop.is_set(),
            stopped=self._stopped.is_set(),
            ready=self.ready,
            last_round=self._last_round,
            cut_at_deadline=self._cut_at_deadline,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run rounds on the cadence until ``stop()``; reports started before the first round.

        Cancellation:
            Cancelling the caller's scope cuts everything at once (claims left to expire);
            ``stop()`` is the graceful path with a deadline.

        Raises:
            RuntimeError: when called a second time.
        """
        if self._started:
            raise RuntimeError("a Lifecycle runs once")
        self._started = True
        self._running = True
        try:
            task_status.started()
            await self._cadence()
            if not self._cut_at_deadline:
                # Fires held ahead go back undecided (another replica fires them when due),
                # within what is left of the stop deadline.
                with trio.move_on_at(self._stop_deadline):
                    await self._coordinator.release_ahead()
        finally:
            self._running = False
            self._round_scope = None
            self._stopped.set()
            self._round_ended.set()

    def stop(self) -> None:
        """Stop claiming now and give the round in flight ``stop_timeout_ms`` to finish.

        Idempotent; may be called before ``run`` (which then returns at once). Must be called
        from the Trio thread.
        """
        if self._stop.is_set():
            return
        self._stop.set()
        self._stop_deadline = trio.current_time() + self._stop_timeout_s
        scope = self._round_scope
        if scope is not None:
            scope.deadline = min(scope.deadline, trio.current_time() + self._stop_timeout_s)

    async def wait_stopped(self) -> None:
        """Return once ``run`` has returned."""
        await self._stopped.wait()

    async def wait_rounds(self, rounds: int) -> None:
        """Return once ``rounds`` rounds have ended in total, or the lifecycle has stopped."""
        while self._rounds < rounds and not self._stopped.is_set():
            await self._round_ended.wait()

    async def _cadence(self) -> None:
        while not self._stop.is_set():
            started = trio.current_time()
            stats: RoundStats | None = None
            failure: Exception | None = None
            try:
                with trio.CancelScope() as scope:
                    self._round_scope = scope
                    stats = await self._coordinator.run_round(self._stop)
            except Exception as exc:
                # Also what is left of an ExceptionGroup once the scope took its Cancelled.
                failure = exc
            finally:
                self._round_scope = None
            self._end_round(stats, failure)
            if scope.cancelled_caught:
                # Only ``stop()`` puts a deadline on the round's scope: the drain is over.
                self._cut_at_deadline = True
                return
            delay = self._delay(stats, started)
            with trio.move_on_at(started + delay):
                await self._stop.wait()

    def _end_round(self, stats: RoundStats | None, failure: Exception | None) -> None:
        self._rounds += 1
        if failure is not None:
            self._round_failures += 1
            self._consecutive_failures += 1
            self._metrics.round_failures.inc()
            self._metrics.count_error(ROUND_FAILED)
            self._sink.emit(
                from_exception(
                    ROUND_FAILED, failure, replica=self._owner, count=self._consecutive_failures
                )
            )
        elif stats is not None:
            self._consecutive_failures = 0
            self._last_round = stats
            # A lost reply (a cut connection, a call with no answer in its budget) is the
            # first sign of a silent database; the next round that goes through clears it.
            self._reply_lost = stats.commit_unknown > 0
        round_ended, self._round_ended = self._round_ended, trio.Event()
        round_ended.set()

    def _delay(self, stats: RoundStats | None, started: float) -> float:
        """Seconds from the round's start (``started``, Trio time) to the next round's."""
        if self._consecutive_failures:
            exponent = min(self._consecutive_failures, _MAX_BACKOFF_EXPONENT)
            return min(self._cadence_s * (1 << exponent), self._max_backoff_s)
        if stats is not None and stats.budget_exhausted and stats.released < stats.claimed:
            # Catch-up. A round that handed every claim straight back would claim the very
            # same rows again at once (they stay first in claim order): wait a cadence.
            return 0.0
        delay = self._cadence_s
        if stats is not None and stats.next_due_in_ms is not None:
            # Wake for the next row to fall due when that comes before the cadence: a due
            # row waits milliseconds, not up to a cadence. The database measured the gap
            # (no local clock is trusted); a floor keeps rows due a few ms apart from
            # turning the loop into a spin.
            delay = min(delay, max(stats.next_due_in_ms / 1000 + WAKE_SLACK_S, MIN_WAKE_S))
        if stats is not None and stats.next_due_stale:
            # The round moved cursors after its claim read the next due time: that read is
            # stale (a moved cursor may be the next due), so read it again soon.
            delay = min(delay, MIN_WAKE_S)
        if stats is not None and stats.held_due_at is not None:
            # A Fire held ahead is admitted by the first round after its due time.
            delay = min(delay, max(0.0, stats.held_due_at - started))
        return delay
