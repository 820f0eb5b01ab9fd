"""The Edge scheduler: rounds on one file at a cadence, one process, no lease.

A round is the shared engine's (``qlsched.engine.round``): it reads up to ``claim_budget``
due rows (a read, ``SqliteStore.claim``), decides each with ``core.decide`` on the read's
time, and writes every Fire, Initialize and Skip in one transaction (``SqliteStore.commit``),
each fenced by its cursor compare-and-set; then it serves the trigger-now and backfill
requests (``edge.requests``), each chunk in its own transaction, and its Runs' start
deadlines and held Runs (``edge.runs_pass``). Rounds never
overlap; a round that filled its budget and wrote something is followed at once by the next
(catch-up). Stop is graceful by construction: a round's transaction runs in a worker thread
that is never abandoned, so a stop between rounds or after the current one loses nothing.

Ownership: ``run`` is the only task; it owns no nursery. Authority: the file decides every
write (the compare-and-set); this process's clock is the profile's only clock.
"""

from __future__ import annotations

from typing import Final, Protocol

import trio

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.edge.requests import NOMINAL_LEASE_MS, EdgeRequests
from qlsched.edge.runs_pass import EdgeRunsPass
from qlsched.edge.settings import EdgeSettings
from qlsched.engine.passes import Passes
from qlsched.engine.round import RoundEngine, RoundMetrics
from qlsched.engine.stats import RoundStats
from qlsched.sqlite.errors import EdgeDatabaseError
from qlsched.sqlite.requests import SqliteRequestStore
from qlsched.sqlite.store import SqliteStore
from qlsched.summary import SummaryCounts

SPEC_CACHE_SIZE: Final = 1024
TICK_SLACK_MS: Final = 2


class EdgeMetrics(RoundMetrics, Protocol):
    """What the Edge's rounds feed: the engine's metrics, round failures, the summary."""

    def count_round_failure(self) -> None: ...

    def count_runs_pass(self, deadline_cancelled: int, released: int) -> None: ...

    def count_request(self, code: str, occurrences: dict[str, int]) -> None: ...

    def summary_counts(self) -> dict[str, float]: ...


class EdgeScheduler:
    """Rounds against one ``SqliteStore`` at the cadence. Ownership: borrows the store;
    holds no task. A round is the shared engine's, written in one transaction."""

    def __init__(
        self,
        store: SqliteStore,
        settings: EdgeSettings,
        sink: DiagnosticSink,
        metrics: EdgeMetrics | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.sink = sink
        self.metrics: EdgeMetrics = metrics if metrics is not None else SummaryCounts()
        """``qlsched.metrics.Metrics(profile="edge")`` when ``/metrics`` is served (the
        cluster's families); else the plain counts of the summary line."""
        self.ready = False
        """True while rounds run (``/readyz``); False before the first and once stopping."""
        self.engine: RoundEngine[EdgeMetrics] = RoundEngine(
            store,
            owner=settings.owner,
            budget=settings.claim_budget,
            lease_ms=NOMINAL_LEASE_MS,
            sink=sink,
            metrics=self.metrics,
            spec_cache_size=SPEC_CACHE_SIZE,
            requests=Passes(
                [
                    EdgeRequests(
                        SqliteRequestStore(store.db),
                        owner=settings.owner,
                        budget=settings.claim_budget,
                        sink=sink,
                        metrics=self.metrics,
                    ),
                    EdgeRunsPass(
                        store.db,
                        owner=settings.owner,
                        budget=settings.claim_budget,
                        metrics=self.metrics,
                    ),
                ]
            ),
            writer=store,
        )

    async def run_round(self) -> RoundStats:
        """Read, decide, write: one round.

        Raises:
            EdgeDatabaseError: the read or the write failed; nothing of the round was written.
        """
        return await self.engine.run_round()

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
        self.ready = True
        task_status.started()
        try:
            while not stop.is_set():
                try:
                    stats = await self.run_round()
                except EdgeDatabaseError as exc:
                    self.metrics.count_round_failure()
                    self.sink.emit(Diagnostic(code="round_failed", exception=exc.code))
                    if exc.fatal:
                        raise
                    stats = RoundStats(budget=self.settings.claim_budget)
                if stats.budget_exhausted and stats.written > 0:
                    continue
                with trio.move_on_after(self._until_tick_s()):
                    await stop.wait()
        finally:
            self.ready = False
