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

from typing import Final, assert_never

import msgspec
import trio

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.request_chunks import RequestCrons, request_chunk
from qlsched.core.requests import (
    RequestAdmitted,
    RequestCommitUnknown,
    RequestFailed,
    RequestFenceLost,
    RequestHeld,
    RequestOutcome,
    RequestRefused,
    RequestWaiting,
)
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
        self, store: SqliteRequestStore, *, owner: str, budget: int, sink: DiagnosticSink
    ) -> None:
        self._store = store
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
            self._report(outcome)
            if isinstance(outcome, RequestAdmitted):
                admitted += outcome.admitted
                already += outcome.already_admitted
        return EdgeRequestStats(len(batch.claims), admitted, already)

    def _report(self, outcome: RequestOutcome) -> None:
        """A diagnostic for what an operator must see: a refusal, a failed admit."""
        match outcome:
            case RequestRefused(reason=reason):
                self._emit("request_refused", outcome, part=reason)
            case RequestFailed(sqlstate=code, exception=exception):
                self._emit("request_failed", outcome, sqlstate=code, exception=exception)
            case RequestAdmitted() | RequestWaiting() | RequestHeld() | RequestFenceLost():
                pass
            case RequestCommitUnknown():
                pass  # a file's commit is never unknown; the union is the cluster's too
            case _:
                assert_never(outcome)

    def _emit(
        self,
        code: str,
        outcome: RequestOutcome,
        *,
        part: str | None = None,
        sqlstate: str | None = None,
        exception: str | None = None,
    ) -> None:
        self._sink.emit(
            Diagnostic(
                code=code,
                replica=self._owner,
                project_id=outcome.project_id,
                trigger_id=outcome.trigger_id,
                part=part,
                sqlstate=sqlstate,
                exception=exception,
            )
        )
