"""The runs pass of a round: unstarted Runs past their start deadline cancelled, held Runs
released (docs/contract.md §13, overlap and start deadline).

An unstarted Run is still the runtime's (its Attempt is pristine), so replicas do both, with
no leader: each statement takes its rows ``SKIP LOCKED``, up to the round's claim budget,
soonest first through a partial index, so its cost follows the Runs it acts on. A held Run
is released by the worker that ended the Run before it; this pass is the guarantee behind
it (a worker that died, or a release that raced the admit of the held Run).

Cost when nobody uses either: two probes of empty partial indexes per poll interval (a few
cadences, as the requests pass), not per round; a full batch looks again next round.
"""

from __future__ import annotations

from typing import Final

import msgspec
import trio

from qlsched.core.config import Config
from qlsched.core.diagnostics import DiagnosticSink, from_exception
from qlsched.core.lease import PollTimer
from qlsched.metrics import Metrics
from qlsched.postgres.overlap import cancel_unstarted, release_held
from qlsched.postgres.pool import Database

RUNS_PASS_FAILED: Final = "runs_pass_failed"


class RunsPassStats(msgspec.Struct, frozen=True):
    looked: bool
    deadline_cancelled: int = 0
    released: int = 0


class RunsPass:
    """Start deadlines and held Runs, after a round's schedule rows, up to the config's claim
    budget per statement, polled at the default interval. Ownership: borrows the claim pool
    (READ COMMITTED, autocommit: each statement commits at once)."""

    def __init__(
        self, db: Database, config: Config, sink: DiagnosticSink, metrics: Metrics
    ) -> None:
        self._db = db
        self._owner = config.owner
        self._budget = config.claim_budget
        self.poll: Final = PollTimer(config.cadence_ms, config.lease_ms)
        self._sink = sink
        self._metrics = metrics

    async def run(self, stop: trio.Event | None = None) -> RunsPassStats:
        """One pass, when its poll is due (or the last one filled a batch)."""
        now = trio.current_time()
        if (stop is not None and stop.is_set()) or not self.poll.due(now):
            return RunsPassStats(looked=False)
        self.poll.looked(now)
        try:
            cancelled = await cancel_unstarted(self._db, limit=self._budget, actor=self._owner)
            released = await release_held(self._db, limit=self._budget, actor=self._owner)
        except Exception as exc:
            # Reported and counted; the next poll tries again (nothing is lost meanwhile:
            # a Run past its deadline stays queued, a held one held).
            self._metrics.count_error(RUNS_PASS_FAILED)
            self._sink.emit(from_exception(RUNS_PASS_FAILED, exc, replica=self._owner))
            return RunsPassStats(looked=True)
        self._metrics.count_runs_pass(len(cancelled), len(released))
        if self._budget in (len(cancelled), len(released)):
            self.poll.again()  # a full batch: more may wait
        return RunsPassStats(looked=True, deadline_cancelled=len(cancelled), released=len(released))
