"""The Edge scheduler: rounds on one file at a cadence, one process, no lease.

A round reads up to ``claim_budget`` due rows (a read, ``SqliteStore.claim``), decides each
with ``core.decide`` on the read's time, and writes every Fire, Initialize and Skip in one
transaction (``SqliteStore.commit``), each fenced by its cursor compare-and-set. Rounds never
overlap; a round that filled its budget and wrote something is followed at once by the next
(catch-up). Stop is graceful by construction: a round's transaction runs in a worker thread
that is never abandoned, so a stop between rounds or after the current one loses nothing.

Ownership: ``run`` is the only task; it owns no nursery. Authority: the file decides every
write (the compare-and-set); this process's clock is the profile's only clock.
"""

from __future__ import annotations

from typing import Final

import msgspec
import trio

from qlsched.core.decide import decide
from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.fence import FireRequest
from qlsched.core.keys import fire_request
from qlsched.core.outcomes import (
    Admitted,
    Fire,
    Initialize,
    Initialized,
    NotDue,
    Outcome,
    Skip,
    Skipped,
    outcome_code,
)
from qlsched.core.spec_cache import InvalidSpec, SpecCache
from qlsched.edge.metrics import EdgeMetrics
from qlsched.edge.settings import EdgeSettings
from qlsched.sqlite.errors import EdgeDatabaseError
from qlsched.sqlite.store import Settle, SqliteStore

NOMINAL_LEASE_MS: Final = 30_000
"""Recorded in a claim's nominal fence only; nothing expires on the Edge."""
SPEC_CACHE_SIZE: Final = 1024
TICK_SLACK_MS: Final = 2


class RoundStats(msgspec.Struct, frozen=True):
    claimed: int = 0
    written: int = 0
    admitted: int = 0


class EdgeScheduler:
    """Rounds against one ``SqliteStore``. Ownership: borrows the store; holds no task."""

    def __init__(self, store: SqliteStore, settings: EdgeSettings, sink: DiagnosticSink) -> None:
        self.store = store
        self.settings = settings
        self.sink = sink
        self.metrics = EdgeMetrics()
        self.ready = False
        """True while rounds run (``/readyz``); False before the first and once stopping."""
        self._specs = SpecCache(SPEC_CACHE_SIZE)

    async def run_round(self) -> RoundStats:
        """Read, decide, write: one round.

        Raises:
            EdgeDatabaseError: the read or the write failed; nothing of the round was written.
        """
        started = trio.current_time()
        claims = await self.store.claim(
            self.settings.owner, self.settings.claim_budget, NOMINAL_LEASE_MS
        )
        fires: list[FireRequest] = []
        settles: list[Settle] = []
        for claim in claims:
            spec = self._specs.get(claim)
            if isinstance(spec, InvalidSpec):
                self.metrics.invalid_specs += 1
                self.sink.emit(
                    Diagnostic(
                        code="spec_invalid",
                        project_id=claim.project_id,
                        trigger_id=claim.trigger_id,
                        exception=spec.exception,
                    )
                )
                continue
            decision = decide(spec, claim.cursor_ms, claim.claimed_at_ms, claim.jitter)
            match decision:
                case Fire():
                    fires.append(fire_request(claim, decision))
                case Initialize() | Skip():
                    settles.append((claim, decision))
                case NotDue():
                    pass  # the read filters on the due time: only a clock step back gets here
        outcomes = await self.store.commit(fires, settles)
        admitted = self._tally(outcomes, [f.jitter_offset_ms for f in fires])
        self.metrics.rounds += 1
        self.metrics.claimed += len(claims)
        self.metrics.round_seconds_sum += trio.current_time() - started
        return RoundStats(claimed=len(claims), written=len(outcomes), admitted=admitted)

    def _tally(self, outcomes: list[Outcome], offsets: list[int]) -> int:
        """Count a round's outcomes; ``offsets`` are its Fires' jitter (outcomes list the
        Fires first, in order), so the lag is measured from each occurrence's due time."""
        admitted = 0
        counts = self.metrics.outcomes
        for i, outcome in enumerate(outcomes):
            code = outcome_code(outcome)
            counts[code] = counts.get(code, 0) + 1
            match outcome:
                case Admitted():
                    admitted += 1
                    offset = offsets[i] if i < len(offsets) else 0
                    late_ms = outcome.admitted_at_ms - outcome.scheduled_for_ms
                    self.metrics.observe_lag(late_ms - offset, late_ms)
                case Skipped():
                    self.metrics.skipped_occurrences += outcome.skipped
                case Initialized():
                    pass
                case _:
                    self.sink.emit(
                        Diagnostic(
                            code=code,
                            project_id=outcome.project_id,
                            trigger_id=outcome.trigger_id,
                            part=getattr(outcome, "part", None),
                        )
                    )
        return admitted

    def _until_tick_s(self) -> float:
        """Seconds to the next cadence tick on the wall clock's grid, plus a little slack:
        occurrences fall on whole seconds, so a round aligned to them admits an occurrence
        within milliseconds instead of half a cadence late on average."""
        cadence = self.settings.cadence_ms
        return (cadence - self.store.clock() % cadence + TICK_SLACK_MS) / 1000

    async def run(
        self, stop: trio.Event, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run rounds at the cadence until ``stop`` is set; the current round completes.

        Raises:
            EdgeDatabaseError: a fatal storage failure (a full disk, a read-only or corrupt
                file); transient ones (a lock held past the busy timeout) are reported and
                the next round tries again.
        """
        budget = self.settings.claim_budget
        self.ready = True
        task_status.started()
        try:
            while not stop.is_set():
                try:
                    stats = await self.run_round()
                except EdgeDatabaseError as exc:
                    self.metrics.round_failures += 1
                    self.sink.emit(Diagnostic(code="round_failed", exception=exc.code))
                    if exc.fatal:
                        raise
                    stats = RoundStats()
                if stats.claimed >= budget and stats.written > 0:
                    continue
                with trio.move_on_after(self._until_tick_s()):
                    await stop.wait()
        finally:
            self.ready = False
