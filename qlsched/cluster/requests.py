"""The requests pass of a round: trigger-now and backfill requests, under the round's rules.

After the schedule rows' work, a round claims up to its budget of pending requests (one
statement, a lease each) and admits each one's chunk in its own SERIALIZABLE statement: a
trigger-now request its one Run (key ``ql3:manual:v1:…``, ``scheduled_for`` = when it was
recorded; the cron cursor does not move), a backfill up to the claim budget of its next
occurrences under their cron keys, never at or past the trigger's cron cursor.

Cost when nobody asked: the pass sends nothing. It claims only when the last claim saw a
pending request (work left, or another replica's lease to outlive) or when its poll timer
is due (``poll_s``: a few cadences, well inside a lease), so a replica that has seen no
request costs one index probe of an empty partial index per ``poll_s``, not per round.
Rejected: a claim every round (a statement more per round, against the drain's rate);
LISTEN/NOTIFY (a connection per replica held open, and a missed notification still needs
the timer).

Authority: the database decides each fence and refusal; this module picks each chunk from
the trigger's own cron (``core.requests.backfill_chunk``) and counts outcomes.
"""

from __future__ import annotations

from typing import Final

import msgspec
import trio

from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.diagnostics import DiagnosticSink, from_exception
from qlsched.core.lease import PollTimer
from qlsched.core.request_chunks import RequestCrons, request_chunk
from qlsched.core.requests import (
    RequestAdmitted,
    RequestChunk,
    RequestClaim,
    RequestOutcome,
    RequestStore,
)
from qlsched.engine.request_outcomes import report_request

REQUEST_TASK_FAILED: Final = "request_task_failed"


class RequestStats(msgspec.Struct, frozen=True):
    """One pass: whether it looked, what it claimed and admitted."""

    looked: bool
    claimed: int = 0
    admitted: int = 0
    already_admitted: int = 0


class RequestsPass:
    """Claims and admits requests for one replica, at most once per round.

    Ownership: no task, no nursery; the coordinator awaits ``run`` inside its round. The
    poll timer and the pending flag are the only state between rounds.
    """

    def __init__(
        self,
        store: RequestStore,
        config: Config,
        sink: DiagnosticSink,
        metrics: Metrics,
        *,
        budget: int,
        poll_s: float | None = None,
    ) -> None:
        self._store = store
        self._owner = config.owner
        self._lease_ms = config.lease_ms
        self._budget = budget  # a Config's claim_budget: validated there (>= 1), trusted here
        self.poll: Final = PollTimer(config.cadence_ms, config.lease_ms, poll_s)
        self._pending = True
        """A request may be pending: look next round (true at start: a restart may find
        requests recorded while no replica ran)."""
        self._cron = RequestCrons(sink, config.owner)
        self._sink = sink
        self._metrics = metrics

    async def run(self, stop: trio.Event | None = None) -> RequestStats:
        """One pass: nothing at all unless a request may be pending or the poll is due."""
        now = trio.current_time()
        if (stop is not None and stop.is_set()) or not (self._pending or self.poll.due(now)):
            return RequestStats(looked=False)
        self.poll.looked(now)
        batch = await self._store.claim(self._owner, self._budget, self._lease_ms)
        self._pending = batch.any_pending
        admitted = already = 0
        for claim in batch.claims:
            outcome = await self._admit_one(claim)
            if isinstance(outcome, RequestAdmitted):
                admitted += outcome.admitted
                already += outcome.already_admitted
        return RequestStats(
            looked=True, claimed=len(batch.claims), admitted=admitted, already_admitted=already
        )

    async def _admit_one(self, claim: RequestClaim) -> RequestOutcome | None:
        try:
            chunk = self.chunk_for(claim)
            if chunk is None:
                return None
            outcome = await self._store.admit(chunk)
        except Exception as exc:
            # A bug or an unclassified failure: the claim expires and is taken again.
            self._sink.emit(
                from_exception(
                    REQUEST_TASK_FAILED,
                    exc,
                    replica=self._owner,
                    project_id=claim.project_id,
                    trigger_id=claim.trigger_id,
                )
            )
            return None
        self._count(outcome)
        return outcome

    def chunk_for(self, claim: RequestClaim) -> RequestChunk | None:
        """The occurrences to admit for ``claim`` (``core.request_chunks``); None: its spec
        cannot be used (left to expire, reported)."""
        return request_chunk(claim, self._budget, self._cron)

    def _count(self, outcome: RequestOutcome) -> None:
        report_request(outcome, owner=self._owner, sink=self._sink, metrics=self._metrics)
