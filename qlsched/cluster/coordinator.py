"""One bounded coordinator round: claim, decide each claim in its own task, admit the Fires.

Authority: the database decides who holds a row (the claim fence) and what time it is (each
claim carries the database time it was taken, the ``now`` of its decision). This module only
computes and drives the ``ScheduleStore`` port; it reads no clock of its own except Trio's,
for the round's duration.

Invariants of a round:

- exactly one ``store.claim(owner, limit, lease_ms)`` call, ``limit`` = the claim budget
  (hard cap 256);
- each claim is settled in its own task in a nursery the round opens, so the round returns
  only when every claim task has ended: rounds cannot overlap by construction;
- Run and Attempt ids are minted (``keys.fire_request``) only for a ``Fire`` decision;
- the round's Fires are admitted together in at most one ``store.admit`` call, after the
  nursery has ended (batch admission, docs/contract.md §5);
- a claim task catches ``Exception`` at its top and reports a diagnostic (class name and
  SQLSTATE only, never the message); ``Cancelled`` and other ``BaseException`` pass;
- when the lifecycle is stopping, a claim not yet decided is released under its fence
  instead of being decided.

A claim the round could not settle (an exception, an unusable spec, a digest that does not
verify, an unknown commit) is left to expire: one lease is the natural back-off, and any
replica that later claims the row decides the same occurrence under the same key.
"""

from __future__ import annotations

from typing import Final, assert_never

import trio

from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.cluster.stats import RoundCounts, RoundStats
from qlsched.core.config import Config
from qlsched.core.decide import decide
from qlsched.core.diagnostics import Diagnostic, DiagnosticSink, from_exception
from qlsched.core.fence import Claim, FireRequest
from qlsched.core.keys import fire_request
from qlsched.core.lease import round_outlived_lease
from qlsched.core.outcomes import (
    Admitted,
    CommitUnknown,
    DigestInvalid,
    FenceLost,
    Fire,
    Inactive,
    Initialize,
    Initialized,
    NotDue,
    Outcome,
    Released,
    RetryExhausted,
    RevisionChanged,
    Skip,
    Skipped,
    StoreFailed,
    outcome_code,
)
from qlsched.core.spec_cache import InvalidSpec, SpecCache
from qlsched.core.store import ScheduleStore

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


class Coordinator:
    """Runs bounded rounds against one store for one replica (``config.owner``).

    Ownership: holds no task and no nursery between rounds; ``run_round`` opens and closes
    its own. The spec cache is the only state that outlives a round. The lifecycle calls
    ``run_round`` sequentially; calling it concurrently is allowed by the store protocol but
    defeats the budget.
    """

    def __init__(
        self,
        store: ScheduleStore,
        config: Config,
        sink: DiagnosticSink,
        metrics: Metrics,
        *,
        spec_cache_size: int = SPEC_CACHE_SIZE,
        requests: RequestsPass | None = None,
    ) -> None:
        self._store = store
        self._owner = config.owner
        self._lease_ms = config.lease_ms
        self._budget = config.claim_budget
        self._round_budget = self._budget
        """Halved after a round that outlived its lease, doubled back after one that did
        not: a round too slow for its lease claims less instead of failing the same way."""
        self._specs = SpecCache(spec_cache_size)
        self.sink: Final = sink
        self.metrics: Final = metrics
        self.requests: Final = requests
        """Trigger-now and backfill requests, served after the schedule rows each round."""

    @property
    def budget(self) -> int:
        """Rows claimed per round at most: ``config.claim_budget`` (1..256, checked by
        ``Config``)."""
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
        try:
            claims = await self._store.claim(self._owner, budget, self._lease_ms)
            tally.claimed = len(claims)
            tally.stopping = stop is not None and stop.is_set()
            fires: list[FireRequest] = []
            async with trio.open_nursery() as nursery:
                for claim in claims:
                    nursery.start_soon(self._settle, claim, stop, fires, tally)
            if fires:
                await self._admit_in_lease(fires, tally, started)
            if self.requests is not None:
                await self.requests.run(stop)
        finally:
            duration_ms = (trio.current_time() - started) * 1000
            stats = RoundStats.freeze(tally, budget, duration_ms)
            self.metrics.observe_round(stats)
        return stats

    async def _settle(
        self,
        claim: Claim,
        stop: trio.Event | None,
        fires: list[FireRequest],
        tally: RoundCounts,
    ) -> None:
        """Decide one claim and write its result (or queue its Fire for the batch)."""
        try:
            if stop is not None and stop.is_set():
                tally.released_on_stop += 1
                self._count(await self._store.release(claim), tally)
                return
            spec = self._specs.get(claim)
            if isinstance(spec, InvalidSpec):
                # Left to expire rather than released: a released row is due again at once
                # and, ordered first, would take the budget from valid rows every round.
                tally.count_error(SPEC_INVALID)
                self._emit(SPEC_INVALID, claim, at_ms=claim.claimed_at_ms, exception=spec.exception)
                return
            decision = decide(spec, claim.cursor_ms, claim.claimed_at_ms, claim.jitter)
            match decision:
                case Initialize():
                    outcome = await self._store.initialize(claim, decision)
                case NotDue():
                    tally.not_due += 1
                    outcome = await self._store.release(claim)
                case Fire():
                    fires.append(fire_request(claim, decision))
                    tally.fired += 1
                    return
                case Skip():
                    outcome = await self._store.skip(claim, decision)
                case _:
                    assert_never(decision)
            self._count(outcome, tally)
        except Exception as exc:
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
    ) -> None:
        """Admit the round's Fires, unless the round has outlived its lease: then let the
        claims go (they expire; the next claimer decides the same occurrences) and claim
        less next time, instead of sending an admit whose every fence fails."""
        if round_outlived_lease(trio.current_time() - started, self._lease_ms):
            tally.count_error(LEASE_OVERRUN)
            self.sink.emit(Diagnostic(code=LEASE_OVERRUN, replica=self._owner, count=len(fires)))
            self._round_budget = max(1, self._round_budget // 2)
            return
        await self._admit(fires, tally)
        self._round_budget = min(self._budget, self._round_budget * 2)

    async def _admit(self, fires: list[FireRequest], tally: RoundCounts) -> None:
        try:
            outcomes = await self._store.admit(fires)
        except Exception as exc:
            # The store reports every expected failure as an outcome; an exception here is
            # a bug or an unclassified boundary failure. Nothing is retried: the claims
            # expire and the next claimer admits the same occurrences under the same keys.
            tally.count_error(ADMIT_FAILED)
            self.sink.emit(from_exception(ADMIT_FAILED, exc, replica=self._owner, count=len(fires)))
            return
        if len(outcomes) != len(fires):
            tally.count_error(ADMIT_MISMATCH)
            self.sink.emit(Diagnostic(code=ADMIT_MISMATCH, replica=self._owner, count=len(fires)))
            return
        for fire, outcome in zip(fires, outcomes, strict=True):
            if isinstance(outcome, Admitted):
                tally.coalesced += fire.coalesced
                self.metrics.observe_lag_ms(
                    outcome.admitted_at_ms - outcome.scheduled_for_ms - fire.jitter_offset_ms,
                    outcome.admitted_at_ms - outcome.scheduled_for_ms,
                )
            self._count(outcome, tally)

    def _count(self, outcome: Outcome, tally: RoundCounts) -> None:
        """Tally one store outcome; report those an operator must see."""
        match outcome:
            case Admitted():
                tally.admitted += 1
            case Initialized():
                tally.initialized += 1
            case Skipped(skipped=skipped):
                tally.skipped += 1
                tally.skipped_occurrences += skipped
            case Released():
                tally.released += 1
            case FenceLost(part=part):
                # A lost race is normal operation (a takeover after expiry, a re-publish):
                # counted by part, not reported.
                tally.fence_lost[part] = tally.fence_lost.get(part, 0) + 1
            case RevisionChanged(part=part):
                # A trigger or cursor change is a re-publish racing this round: it heals.
                # A task or execution pin that moved without its trigger does not.
                tally.revision_changed += 1
                if part in ("task", "execution"):
                    self._refused(outcome, part)
            case Inactive(reason=reason):
                tally.inactive += 1
                self._refused(outcome, reason)
            case DigestInvalid(part=part):
                tally.digest_invalid += 1
                self._refused(outcome, part)
            case CommitUnknown(exception=exception):
                tally.commit_unknown += 1
                self._emit(outcome_code(outcome), outcome, exception=exception)
            case RetryExhausted(attempts=attempts, sqlstate=sqlstate):
                tally.retry_exhausted += 1
                self._emit(outcome_code(outcome), outcome, sqlstate=sqlstate, count=attempts)
            case StoreFailed(sqlstate=sqlstate, exception=exception):
                tally.store_failed += 1
                self._emit(outcome_code(outcome), outcome, sqlstate=sqlstate, exception=exception)
            case _:
                assert_never(outcome)

    def _refused(self, outcome: RevisionChanged | Inactive | DigestInvalid, part: str) -> None:
        """An admit refused for a reason that does not heal by itself, until an operator
        re-publishes: a diagnostic naming it, and a metric by outcome and part."""
        code = outcome_code(outcome)
        self.metrics.count_refused(code, part)
        self._emit(code, outcome, part=part)

    def _emit(
        self,
        code: str,
        about: Claim | Outcome,
        *,
        at_ms: int | None = None,
        part: str | None = None,
        sqlstate: str | None = None,
        exception: str | None = None,
        count: int | None = None,
    ) -> None:
        """A diagnostic about one trigger (a claim of it, or a store outcome for it)."""
        self.sink.emit(
            Diagnostic(
                code=code,
                replica=self._owner,
                at_ms=at_ms,
                project_id=about.project_id,
                trigger_id=about.trigger_id,
                part=part,
                sqlstate=sqlstate,
                exception=exception,
                count=count,
            )
        )
