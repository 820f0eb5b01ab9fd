"""One bounded round over the store port, for both profiles: claim, decide, write.

The cluster (``cluster.coordinator``, PostgreSQL, leases) and the Edge (``edge.scheduler``,
one SQLite file, no lease) run this same engine; they differ only in how a round's writes
reach the store. With leases, each claim is settled in its own task and the Fires are
admitted in one batch while the lease holds (below). Without leases the store writes the
whole round in one transaction (``RoundWriter.commit``: the Fires' Runs with their cursors,
then the initializes and skips), and a claim not due is left as it is (a claim wrote
nothing, so there is nothing to release). Either way the outcomes are tallied by one
``_count`` over the closed outcome union (``assert_never``) into one ``RoundStats``.

Authority: the database decides who holds a row (the claim fence) and what time it is (each
claim carries the database time it was taken, the ``now`` of its decision). This module only
computes and drives the ``ScheduleStore`` port; it reads no clock of its own except Trio's,
for the round's duration.

Invariants of a round:

- at most one ``store.claim(owner, limit, lease_ms)`` call, ``limit`` = the round's budget
  (the claim budget; more while catching up, ``_next_budget``; hard cap 256), less what
  the Fires held ahead take of the catch-up budget (none claimed when they take it all);
- each claim is settled in its own task in a nursery the round opens, so the round returns
  only when every claim task has ended: rounds cannot overlap by construction;
- Run and Attempt ids are minted (``keys.fire_request``) only for a ``Fire`` decision;
- the round's Fires are admitted together in at most one ``store.admit`` call, beside
  the other claims' writes (batch admission, docs/contract.md §5); a Fire decided ahead of
  its due time (a claim with a lookahead) is held across rounds until then
  (``engine.ahead``), and admitted with the first round that starts after it;
- a claim task catches ``Exception`` at its top and reports a diagnostic (class name and
  SQLSTATE only, never the message); ``Cancelled`` and other ``BaseException`` pass;
- when the lifecycle is stopping, a claim not yet decided is released under its fence
  instead of being decided.

A claim the round could not settle (an exception, an unusable spec, a digest that does not
verify, an unknown commit) is left to expire: one lease is the natural back-off, and any
replica that later claims the row decides the same occurrence under the same key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Generic, Protocol, TypeVar, assert_never

import trio

from qlsched.core.decide import decide
from qlsched.core.diagnostics import Diagnostic, DiagnosticSink, from_exception
from qlsched.core.fence import Claim, FireRequest
from qlsched.core.keys import fire_request
from qlsched.core.lease import round_outlived_lease
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    Decision,
    Fire,
    Initialize,
    NotDue,
    Outcome,
    OverlapSkipped,
    Skip,
)
from qlsched.core.spec_cache import InvalidSpec, SpecCache
from qlsched.core.store import RoundWriter, ScheduleStore, Settle
from qlsched.engine.ahead import AheadFires, HeldFire, due_ms
from qlsched.engine.stats import RoundCounts, RoundStats
from qlsched.engine.tally import OutcomeReports

HELD_ROUNDS: Final = 2
"""A replica holds at most this many catch-up budgets of Fires decided ahead: a tick twice
the catch-up budget per replica is all decided before it falls due, and the replicas still
share a larger one."""
SPEC_CACHE_SIZE: Final = 4096
"""Parsed trigger specs kept, keyed by what a spec is built from (``Claim.spec_key``), not
by trigger revision: triggers that share an expression share one parse."""

# Diagnostic (and ``errors`` / metric label) codes raised by the coordinator itself; store
# outcomes that need an operator's eye use their outcome tag as the code.
CLAIM_FAILED: Final = "claim_task_failed"
SPEC_INVALID: Final = "spec_invalid"
ADMIT_FAILED: Final = "admit_error"
ADMIT_MISMATCH: Final = "admit_mismatch"
LEASE_OVERRUN: Final = "lease_overrun"


class _Release:
    """A claim to hand back undecided (the lifecycle is stopping)."""


RELEASE: Final = _Release()


class RoundMetrics(Protocol):
    """What a round feeds its profile's metrics."""

    def observe_round(self, stats: RoundStats) -> None: ...

    def observe_lag_ms(self, from_due_ms: int, from_scheduled_ms: int) -> None: ...

    def count_refused(self, outcome: str, part: str) -> None: ...


class RequestPass(Protocol):
    """Trigger-now and backfill requests, served after the schedule rows each round."""

    async def run(self, stop: trio.Event | None) -> object: ...


M = TypeVar("M", bound=RoundMetrics)


class RoundEngine(Generic[M]):
    """Runs bounded rounds against one store for one scheduler (``owner``).

    Ownership: holds no task and no nursery between rounds; ``run_round`` opens and closes
    its own. The spec cache and the Fires held ahead (``release_ahead`` lets them go) are
    the only state that outlives a round. The caller runs
    ``run_round`` sequentially; calling it concurrently is allowed by the store protocol but
    defeats the budget.

    ``writer`` (the Edge: a store without leases) writes each round in one transaction;
    without it (the cluster) claims are settled one by one and the Fires admitted in a batch
    within the lease. ``owner``, ``budget`` and ``lease_ms`` are trusted: validated where
    they entered (``Config``, ``EdgeSettings``).
    """

    def __init__(
        self,
        store: ScheduleStore,
        *,
        owner: str,
        budget: int,
        lease_ms: int,
        sink: DiagnosticSink,
        metrics: M,
        spec_cache_size: int = SPEC_CACHE_SIZE,
        requests: RequestPass | None = None,
        writer: RoundWriter | None = None,
        max_budget: int | None = None,
        lookahead_ms: int = 0,
    ) -> None:
        self._store = store
        self._writer = writer
        self._owner = owner
        self._lease_ms = lease_ms
        self._budget = budget
        self._max_budget = budget if max_budget is None else max(budget, max_budget)
        """What a catch-up round may grow to (``_next_budget``); the budget itself when None."""
        self._round_budget = self._budget
        """The next round's budget (``_next_budget``)."""
        self._specs = SpecCache(spec_cache_size)
        self._lookahead_ms = lookahead_ms
        """A claim of a row due at most this long after it is decided as of its due time;
        the store must claim no further ahead (``Config.lookahead_ms`` for both)."""
        self._reads_next_due = hasattr(store, "next_due_in_ms")
        """A store that reads the next due time with its claim (PostgreSQL's) says it."""
        self._reports = OutcomeReports(owner, sink, metrics)
        self._ahead = AheadFires()
        """Fires decided ahead of their due time, held until then (``engine.ahead``)."""
        self.sink: Final = sink
        self.metrics: Final = metrics
        self.requests: Final = requests
        """Trigger-now and backfill requests, served after the schedule rows each round."""

    @property
    def budget(self) -> int:
        """Rows claimed per round at most (1..256, checked where the setting entered)."""
        return self._budget

    async def run_round(self, stop: trio.Event | None = None) -> RoundStats:
        """Claim up to the budget, settle every claim, admit the Fires in one batch.

        Args:
            stop: set by the lifecycle when stopping. Set on entry: nothing is claimed. Set
                while the claim statement runs: that statement completes (its rows would
                otherwise be stranded for a whole lease) and every claim it returned is
                released undecided under its fence.

        Returns:
            The round's counts. They are also added to the metrics, even when the round is
            cut short by cancellation or an exception.

        Raises:
            Whatever ``store.claim`` raises (the lifecycle reports it as a round failure).
            Failures after the claim are reported per claim and never raised.

        Cancellation:
            Safe at any point: a claim whose write was cut is left to expire. The caller's
            cancel scope bounds the whole round (the stop deadline).
        """
        budget = self._round_budget
        if stop is not None and stop.is_set():
            return RoundStats(budget=budget, stopping=True)
        started = trio.current_time()
        tally = RoundCounts()
        # Held Fires now due are admitted beside this round's claim; those still held take
        # room from the catch-up budget (``engine.ahead``).
        held = [] if self._writer is not None else self._ahead.take_due(started)
        limit = budget if self._writer is not None else self._room(budget)
        try:
            if self._writer is not None:
                claims = await self._store.claim(self._owner, limit, self._lease_ms)
                self._note_claim(claims, stop, tally)
                await self._write_round(self._writer, claims, tally)
            else:
                await self._cluster_round(held, limit, stop, tally, started)
            if self.requests is not None:
                await self.requests.run(stop)
        finally:
            duration_ms = (trio.current_time() - started) * 1000
            tally.held_due_at = self._ahead.next_due()
            tally.held_ahead = len(self._ahead)
            moved = tally.admitted + tally.overlap_skipped + tally.initialized + tally.skipped
            tally.next_due_stale = moved > 0 and self._reads_next_due
            stats = RoundStats.freeze(tally, limit, duration_ms)
            # A round the held Fires cut short keeps its budget: it says nothing of the load.
            if limit == budget:
                self._round_budget = self._next_budget(stats)
            self.metrics.observe_round(stats)
        return stats

    def _room(self, budget: int) -> int:
        """The claim's limit: the budget, less what the Fires held ahead already take of
        ``HELD_ROUNDS`` catch-up budgets (a replica holds at most that many)."""
        return max(0, min(budget, HELD_ROUNDS * self._max_budget - len(self._ahead)))

    def _note_claim(
        self, claims: Sequence[Claim], stop: trio.Event | None, tally: RoundCounts
    ) -> None:
        tally.claimed = len(claims)
        hint = getattr(self._store, "next_due_in_ms", None) if self._reads_next_due else None
        tally.next_due_in_ms = hint if isinstance(hint, int) else None
        tally.stopping = stop is not None and stop.is_set()

    async def _cluster_round(
        self,
        held: Sequence[HeldFire],
        limit: int,
        stop: trio.Event | None,
        tally: RoundCounts,
        started: float,
    ) -> None:
        """Admit the ``held`` Fires now due while claiming up to ``limit`` rows (none: the
        held Fires fill the catch-up budget), then settle the claims.

        Raises:
            Whatever ``store.claim`` raises, once the held Fires' admit has ended.
        """
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            if held:
                nursery.start_soon(self._admit_held, held, tally)
            try:
                claims = (
                    await self._store.claim(self._owner, limit, self._lease_ms) if limit else []
                )
            except Exception as exc:
                failure = exc
            else:
                replied = trio.current_time()
                if limit:
                    self._note_claim(claims, stop, tally)
                await self._settle_round(claims, stop, tally, started, replied)
        if failure is not None:
            raise failure

    async def _admit_held(self, held: Sequence[HeldFire], tally: RoundCounts) -> None:
        """Admit held Fires in batches of half the catch-up budget, one after the other: the
        first batch commits as soon as it alone can, not after all of them (a tick's median
        row waits for fewer rows than with whole-budget batches, measured with the bench's
        on_time phase: p50 31-33 against 35-39 ms)."""
        size = max(1, self._max_budget // 2)
        for i in range(0, len(held), size):
            batch = held[i : i + size]
            # The lease check runs from the oldest claim among them.
            oldest = min(h.claimed_at for h in batch)
            if await self._admit_in_lease([h.fire for h in batch], tally, oldest):
                self._ahead.hold_later(held[i + size :])  # behind the same lock, likely
                return

    async def _settle_round(
        self,
        claims: Sequence[Claim],
        stop: trio.Event | None,
        tally: RoundCounts,
        started: float,
        replied: float,
    ) -> None:
        """Decide every claim, hold the Fires not due yet, then write: the Fires due in one
        admit, beside the other claims' writes.

        Every claim is decided first (pure, no I/O): the round's Fires go to their admit at
        once, beside the other claims' writes (Initialize, Skip, release on their own pool),
        instead of after them. Rejected: admitting after every write, which made due rows
        wait on a large publish's Initializes."""
        decided = [(claim, self._decide_or_report(claim, stop, tally)) for claim in claims]
        fires: list[FireRequest] = []
        for claim, decision in decided:
            if isinstance(decision, Fire):
                fire = fire_request(claim, decision)
                tally.fired += 1
                # Due after the claim's time only when decided ahead (``_decide``).
                due = fire.due_ms
                if due > claim.claimed_at_ms:
                    self._ahead.hold(fire, due, due - claim.claimed_at_ms, replied)
                    tally.decided_ahead += 1
                else:
                    fires.append(fire)
        async with trio.open_nursery() as nursery:
            if fires:
                nursery.start_soon(self._admit_in_lease, fires, tally, started)
            for claim, decision in decided:
                if not isinstance(decision, Fire):
                    nursery.start_soon(self._settle, claim, decision, tally)

    async def release_ahead(self) -> None:
        """Release, under their fence, the claims of every Fire held ahead (the replica is
        stopping: another replica fires them when due); counted as a last round, so the
        metrics show the releases and nothing held."""
        held = self._ahead.take_all()
        if not held:
            return
        tally, started = RoundCounts(stopping=True), trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                for h in held:
                    nursery.start_soon(self._settle, h.fire.claim, RELEASE, tally)
        finally:
            duration_ms = (trio.current_time() - started) * 1000
            self.metrics.observe_round(RoundStats.freeze(tally, 0, duration_ms))

    def _next_budget(self, done: RoundStats) -> int:
        """The budget of the round after ``done``.

        - Half, after a round that outlived its lease: a round too slow for its lease claims
          less instead of failing the same way.
        - Twice as many, up to ``max_budget``, after a round that claimed its whole budget
          in under an eighth of the lease: catch-up. Why: a round's fixed cost (two round
          trips, its tasks) is paid per round, so a burst drained 16 rows a round ran at
          about half the rate of 256 a round; the rounds of an ordinary cadence stay small.
        - Otherwise twice as many, up to the configured budget (back from a halving, or
          down from a catch-up).
        """
        if done.errors.get(LEASE_OVERRUN):
            return max(1, done.budget // 2)
        if done.budget_exhausted and done.duration_ms * 8 < self._lease_ms:
            return min(self._max_budget, done.budget * 2)
        return min(self._budget, done.budget * 2)

    def _decide(self, claim: Claim, *, ahead: bool = False) -> Decision | None:
        """The claim's decision, or None when its spec cannot be built (reported, counted,
        and the claim left as it is: released, it would be due again at once and, ordered
        first, would take the budget from valid rows every round). ``ahead``: a row claimed
        before it is due (only a claim with a lookahead returns one) is decided as of its
        due time, and its Fire held until then."""
        spec = self._specs.get(claim)
        if isinstance(spec, InvalidSpec):
            self._tally_invalid(claim, spec)
            return None
        now_ms = claim.claimed_at_ms
        due = due_ms(claim)
        if ahead and due is not None and now_ms < due <= now_ms + self._lookahead_ms:
            now_ms = due
        return decide(spec, claim.cursor_ms, now_ms, claim.jitter)

    def _tally_invalid(self, claim: Claim, spec: InvalidSpec) -> None:
        self._reports.emit(SPEC_INVALID, claim, at_ms=claim.claimed_at_ms, exception=spec.exception)

    async def _write_round(
        self, writer: RoundWriter, claims: Sequence[Claim], tally: RoundCounts
    ) -> None:
        """Decide every claim, then write the round in one transaction (no lease to keep).

        Raises:
            Whatever ``writer.commit`` raises: nothing of the round was written.
        """
        fires: list[FireRequest] = []
        settles: list[Settle] = []
        for claim in claims:
            decision = self._decide(claim)
            match decision:
                case None:
                    tally.count_error(SPEC_INVALID)
                case Fire():
                    fires.append(fire_request(claim, decision))
                    tally.fired += 1
                case Initialize() | Skip():
                    settles.append((claim, decision))
                case NotDue():
                    tally.not_due += 1  # a claim is a read: nothing to release
                case _:
                    assert_never(decision)
        if not fires and not settles:
            return
        outcomes = await writer.commit(fires, settles)
        self._tally_admits(fires, outcomes[: len(fires)], tally)
        for outcome in outcomes[len(fires) :]:
            self._reports.count(outcome, tally)

    def _decide_or_report(
        self, claim: Claim, stop: trio.Event | None, tally: RoundCounts
    ) -> Decision | _Release | None:
        """The claim's decision; ``RELEASE`` when the lifecycle is stopping (released
        undecided); None when it cannot be decided (reported and counted, left to expire)."""
        if stop is not None and stop.is_set():
            tally.released_on_stop += 1
            return RELEASE
        try:
            decision = self._decide(claim, ahead=True)
        except Exception as exc:
            self._claim_failed(claim, exc, tally)
            return None
        if decision is None:
            # Left to expire rather than released (``_decide``).
            tally.count_error(SPEC_INVALID)
        return decision

    async def _settle(
        self, claim: Claim, decision: Decision | _Release | None, tally: RoundCounts
    ) -> None:
        """Write one claim's decision other than a Fire (those go to the round's admit)."""
        try:
            match decision:
                case None:
                    return
                case _Release():
                    outcome = await self._store.release(claim)
                case Initialize():
                    outcome = await self._store.initialize(claim, decision)
                case NotDue():
                    tally.not_due += 1
                    outcome = await self._store.release(claim)
                case Fire():
                    return  # admitted with the round's batch
                case Skip():
                    outcome = await self._store.skip(claim, decision)
                case _:
                    assert_never(decision)
            self._reports.count(outcome, tally)
        except Exception as exc:
            self._claim_failed(claim, exc, tally)

    def _claim_failed(self, claim: Claim, exc: Exception, tally: RoundCounts) -> None:
        tally.count_error(CLAIM_FAILED)
        self.sink.emit(
            from_exception(
                CLAIM_FAILED,
                exc,
                replica=self._owner,
                at_ms=claim.claimed_at_ms,
                project_id=claim.project_id,
                trigger_id=claim.trigger_id,
            )
        )

    async def _admit_in_lease(
        self, fires: list[FireRequest], tally: RoundCounts, started: float
    ) -> int:
        """Admit the round's Fires, unless the round has outlived its lease: then let the
        claims go (they expire; the next claimer decides the same occurrences) and claim
        less next time, instead of sending an admit whose every fence fails. Fires whose
        admit waited out the lock timeout are held to be sent again (``engine.ahead``);
        returns how many."""
        if round_outlived_lease(trio.current_time() - started, self._lease_ms):
            tally.count_error(LEASE_OVERRUN)
            self.sink.emit(Diagnostic(code=LEASE_OVERRUN, replica=self._owner, count=len(fires)))
            return 0
        try:
            outcomes = await self._store.admit(fires)
        except Exception as exc:
            # The store reports every expected failure as an outcome; an exception here is
            # a bug or an unclassified boundary failure. Nothing is retried: the claims
            # expire and the next claimer admits the same occurrences under the same keys.
            tally.count_error(ADMIT_FAILED)
            self.sink.emit(from_exception(ADMIT_FAILED, exc, replica=self._owner, count=len(fires)))
            return 0
        self._tally_admits(fires, outcomes, tally)
        return self._ahead.hold_locked(fires, outcomes, started)

    def _tally_admits(
        self, fires: Sequence[FireRequest], outcomes: Sequence[Outcome], tally: RoundCounts
    ) -> None:
        """Count the Fires' outcomes (one per Fire, in order) and their Runs' lag."""
        if len(outcomes) != len(fires):
            tally.count_error(ADMIT_MISMATCH)
            self.sink.emit(Diagnostic(code=ADMIT_MISMATCH, replica=self._owner, count=len(fires)))
            return
        for fire, outcome in zip(fires, outcomes, strict=True):
            if isinstance(outcome, AlreadyAdmitted | OverlapSkipped):
                tally.coalesced += fire.coalesced
            if isinstance(outcome, Admitted):
                tally.coalesced += fire.coalesced
                self.metrics.observe_lag_ms(
                    outcome.admitted_at_ms - outcome.scheduled_for_ms - fire.jitter_offset_ms,
                    outcome.admitted_at_ms - outcome.scheduled_for_ms,
                )
            self._reports.count(outcome, tally)
