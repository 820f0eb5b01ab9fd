"""The Edge's runs pass: after each round's requests, Runs past their start deadline are
cancelled and held Runs released (``sqlite.overlap.runs_pass``), in one transaction when
there is something to do, bounded by the claim budget.

Rejected: the cluster's poll timer. A look is one read of two partial indexes in the
process's own file; looking every round keeps a deadline within one cadence.
"""

from __future__ import annotations

from typing import Protocol

import trio

from qlsched.sqlite.database import EdgeDatabase
from qlsched.sqlite.overlap import RunsPassStats, runs_pass


class RunsPassMetrics(Protocol):
    def count_runs_pass(self, deadline_cancelled: int, released: int) -> None: ...


class EdgeRunsPass:
    """Ownership: borrows ``db``; no task."""

    def __init__(
        self, db: EdgeDatabase, *, owner: str, budget: int, metrics: RunsPassMetrics
    ) -> None:
        self._db = db
        self._owner = owner
        self._budget = budget
        self._metrics = metrics

    async def run(self, stop: trio.Event | None = None) -> RunsPassStats:
        """One pass.

        Raises:
            EdgeDatabaseError: the file failed; the round reports it and the next tries again
                (a Run past its deadline stays queued meanwhile, a held one held).
        """
        if stop is not None and stop.is_set():
            return RunsPassStats()
        stats = await self._db.call(
            lambda conn: runs_pass(conn, self._db.clock(), self._budget, self._owner)
        )
        self._metrics.count_runs_pass(stats.deadline_cancelled, stats.released)
        return stats
