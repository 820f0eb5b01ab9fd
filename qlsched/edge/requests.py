"""The Edge's requests pass: trigger-now and backfill requests, after each round's rows.

The engine's ``RequestPass`` port, filled for one file: each round looks at the pending
requests that can progress (one read; a paused trigger's requests are held, a backfill
waiting for the cron cursor is not read) and admits each one's chunk in its own
transaction (``SqliteRequestStore``). The chunks are the cluster's rule
(``core.request_chunks``). A round admits at most ``budget`` occurrences in all, trigger-now
requests first (each is one Run), the rest shared evenly by the backfills read, so a large
window progresses a bounded chunk per round and never stalls the schedule rows or starves a
trigger-now.

Rejected: the cluster's poll timer. Requests are recorded by another process, and a look
here is a probe of an empty index in the process's own file: looking every round keeps a
trigger-now within one cadence.
"""

from __future__ import annotations

from typing import Final

import msgspec
import trio

from qlsched.core.diagnostics import DiagnosticSink
from qlsched.core.request_chunks import RequestCrons, request_chunk
from qlsched.core.requests import RequestAdmitted
from qlsched.engine.request_outcomes import RequestMetrics, report_request
from qlsched.sqlite.requests import SqliteRequestStore

NOMINAL_LEASE_MS: Final = 30_000
"""Recorded in a claim's nominal fence only; nothing expires on the Edge."""


class EdgeRequestStats(msgspec.Struct, frozen=True):
    """One pass: the requests read, and the occurrences admitted or found already admitted."""

    read: int = 0
    admitted: int = 0
    already_admitted: int = 0


class EdgeRequests:
    """Serves one file's requests, once per round. Ownership: no task, no nursery; the
    engine awaits ``run`` inside its round. Borrows the store."""

    def __init__(
        self,
        store: SqliteRequestStore,
        *,
        owner: str,
        budget: int,
        sink: DiagnosticSink,
        metrics: RequestMetrics,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._owner = owner
        self._budget = budget  # EdgeSettings' claim_budget: validated there, trusted here
        self._sink = sink
        self._crons = RequestCrons(sink, owner)

    async def run(self, stop: trio.Event | None = None) -> EdgeRequestStats:
        """One pass: read, then admit chunk by chunk until the budget is spent or a stop."""
        if stop is not None and stop.is_set():
            return EdgeRequestStats()
        batch = await self._store.claim(self._owner, self._budget, NOMINAL_LEASE_MS)
        left, admitted, already = self._budget, 0, 0
        for i, claim in enumerate(batch.claims):
            if left <= 0 or (stop is not None and stop.is_set()):
                break
            share = max(1, left // (len(batch.claims) - i))
            chunk = request_chunk(claim, share, self._crons)
            if chunk is None:
                continue
            outcome = await self._store.admit(chunk)
            left -= max(1, len(chunk.occurrences))
            report_request(outcome, owner=self._owner, sink=self._sink, metrics=self._metrics)
            if isinstance(outcome, RequestAdmitted):
                admitted += outcome.admitted
                already += outcome.already_admitted
        return EdgeRequestStats(len(batch.claims), admitted, already)
