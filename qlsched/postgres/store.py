"""The PostgreSQL schedule store: ``core.store``'s port over a claim pool and an admit pool.

Claims, initializes, skips and releases go over a READ COMMITTED pool, one statement each
in autocommit (``claim.py``, ``settle.py``); a round's Fires go over a pool whose
connections default to SERIALIZABLE, in one batch statement (``admit.py``). Every method
returns typed outcomes; a lost race, a stale fence or a changed revision is never raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from qlsched.core.diagnostics import DiagnosticSink
from qlsched.core.fence import Claim, FireRequest
from qlsched.core.outcomes import (
    Initialize,
    Initialized,
    Outcome,
    Released,
    RetryExhausted,
    Skip,
    Skipped,
    StoreFailed,
    lock_waited,
    outcome_code,
)
from qlsched.postgres.admit import ADMIT_SETTINGS, TIMEOUT_CODES, Admission
from qlsched.postgres.claim import CLAIM_SETTINGS, LeaseDeadlines, claim_rows
from qlsched.postgres.pool import Database
from qlsched.postgres.settle import end_claim

__all__ = ["ADMIT_SETTINGS", "CLAIM_SETTINGS", "PostgresStore", "ReplicaPools"]


class ReplicaPools:
    """What both of a replica's PostgreSQL stores (the schedule rows' here, the requests' in
    ``requests.py``) are built on, taken the same way: claims and give-backs over
    ``claim_db``, admits over ``admit_db`` (retried at most ``retries`` times), diagnostics
    to ``sink``. Ownership: borrows both pools."""

    def __init__(
        self,
        claim_db: Database,
        admit_db: Database,
        *,
        retries: int = 5,
        sink: DiagnosticSink | None = None,
        lookahead_ms: int = 0,
    ) -> None:
        self._claim_db = claim_db
        self._admit_db = admit_db
        self._retries = retries
        self._sink = sink
        self._lookahead_ms = lookahead_ms
        """Rows due within this many ms are claimed ahead (the schedule rows' store only)."""


class PostgresStore(ReplicaPools):
    """``ScheduleStore`` over two pools (claims, admits). The HTTP reads have their own
    (``reader.py``)."""

    next_due_in_ms: int | None = None
    """From the last claim to the next unclaimed row's due time (database ms; None: none
    waiting): the lifecycle wakes for it when that is sooner than its cadence."""

    @cached_property
    def _leases(self) -> LeaseDeadlines:
        """The claims' lease deadlines, shared by the claims and the admits."""
        return LeaseDeadlines()

    @cached_property
    def _admission(self) -> Admission:
        return Admission(
            self._admit_db, self._claim_db, self._leases, retries=self._retries, sink=self._sink
        )

    @property
    def admit_statements(self) -> int:
        """Admit statements sent (batches, one-by-one and by-key admits, retries)."""
        return self._admission.statements

    @property
    def early_sends(self) -> int:
        """Times rows claimed ahead and sent before they were due were sent again."""
        return self._admission.early_sends

    @property
    def ssi_retries(self) -> int:
        """Admit statements re-sent after a serialization failure or deadlock."""
        return self._admission.ssi_retries

    async def warm(self, owner: str, connections: int) -> None:
        """Prepare the admit statement on ``connections`` admit connections (``Admission``)."""
        await self._admission.warm(owner, connections)

    async def claim(self, owner: str, limit: int, lease_ms: int) -> list[Claim]:
        claims, self.next_due_in_ms = await claim_rows(
            self._claim_db, owner, limit, lease_ms, self._lookahead_ms
        )
        self._leases.record(claims, lease_ms)
        return claims

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        try:
            outcomes = await self._admission.admit(fires)
            await self._give_back(fires, outcomes)
            return outcomes
        finally:
            # A claim whose admit waited out the lock timeout still holds: the engine may
            # send its Fire again, with the retries its lease has left.
            pairs = zip(fires, outcomes, strict=False)
            held = {f.claim.fence.token for f, o in pairs if lock_waited(o)}
            self._leases.forget([f.claim for f in fires if f.claim.fence.token not in held])

    async def _give_back(self, fires: Sequence[FireRequest], outcomes: Sequence[Outcome]) -> None:
        """Release at once, under their fence, the claims of Fires whose admit could not
        commit (serialization retries spent, a server error), counting the failure on the row:
        the next round may take them instead of waiting out a lease, and a row failing again
        and again shows as stuck. Not after ``CommitUnknown``: the write may have landed, so
        that claim is left to its lease and the next claimer's fence."""
        for fire, outcome in zip(fires, outcomes, strict=False):
            match outcome:
                # A lock or statement timeout is left to the lease: the row is likely
                # still locked, and a release would wait the same timeout again.
                case RetryExhausted(sqlstate=state) if state not in TIMEOUT_CODES:
                    code = f"{outcome_code(outcome)}:{(state or 'none').lower()}"
                    done = Released(fire.claim.project_id, fire.claim.trigger_id)
                    await end_claim(self._claim_db, fire.claim, done, next_ms=None, failure=code)
                case StoreFailed(sqlstate=state):
                    code = f"{outcome_code(outcome)}:{(state or 'none').lower()}"
                    done = Released(fire.claim.project_id, fire.claim.trigger_id)
                    await end_claim(self._claim_db, fire.claim, done, next_ms=None, failure=code)
                case _:
                    pass

    async def initialize(self, claim: Claim, decision: Initialize) -> Outcome:
        p, t, next_ms = claim.project_id, claim.trigger_id, decision.next_ms
        return await self._end(claim, Initialized(p, t, next_ms=next_ms), next_ms=next_ms)

    async def skip(self, claim: Claim, decision: Skip) -> Outcome:
        next_ms, skipped = decision.next_ms, decision.skipped
        done = Skipped(claim.project_id, claim.trigger_id, next_ms=next_ms, skipped=skipped)
        return await self._end(claim, done, next_ms=next_ms, skipped=skipped)

    async def release(self, claim: Claim) -> Outcome:
        return await self._end(claim, Released(claim.project_id, claim.trigger_id), next_ms=None)

    async def _end(
        self, claim: Claim, done: Outcome, *, next_ms: int | None, skipped: int = 0
    ) -> Outcome:
        try:
            return await end_claim(self._claim_db, claim, done, next_ms=next_ms, skipped=skipped)
        finally:
            self._leases.forget([claim])
