"""How a round counts its store outcomes, and reports those an operator must see.

One ``match`` over the closed outcome union (``assert_never``) for both profiles' rounds:
a lost race is counted, not reported; a refusal that does not heal by itself (until an
operator re-publishes) is reported and counted by outcome and part; an unknown commit,
spent retries and store failures are reported with their SQLSTATE.
"""

from __future__ import annotations

from typing import Protocol, assert_never

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.fence import Claim
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    CommitUnknown,
    DigestInvalid,
    FenceLost,
    Inactive,
    Initialized,
    Outcome,
    OverlapSkipped,
    Released,
    RetryExhausted,
    RevisionChanged,
    Skipped,
    StoreFailed,
    outcome_code,
)
from qlsched.engine.stats import RoundCounts


class RefusalMetrics(Protocol):
    def count_refused(self, outcome: str, part: str) -> None: ...


class OutcomeReports:
    """Counts outcomes into a round's tally; reports to ``sink`` as replica ``owner``."""

    def __init__(self, owner: str, sink: DiagnosticSink, metrics: RefusalMetrics) -> None:
        self._owner = owner
        self._sink = sink
        self._metrics = metrics

    def count(self, outcome: Outcome, tally: RoundCounts) -> None:
        """Tally one store outcome; report those an operator must see."""
        match outcome:
            case Admitted(held=held):
                tally.admitted += 1
                tally.held += held
            case OverlapSkipped():
                tally.overlap_skipped += 1
            case AlreadyAdmitted():
                # Reported by the store (a diagnostic and the row's count); nothing heals.
                tally.already_admitted += 1
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
                    self.refused(outcome, part)
            case Inactive(reason=reason):
                tally.inactive += 1
                self.refused(outcome, reason)
            case DigestInvalid(part=part):
                tally.digest_invalid += 1
                self.refused(outcome, part)
            case CommitUnknown(exception=exception):
                tally.commit_unknown += 1
                self.emit(outcome_code(outcome), outcome, exception=exception)
            case RetryExhausted(attempts=attempts, sqlstate=sqlstate):
                tally.retry_exhausted += 1
                self.emit(outcome_code(outcome), outcome, sqlstate=sqlstate, count=attempts)
            case StoreFailed(sqlstate=sqlstate, exception=exception):
                tally.store_failed += 1
                self.emit(outcome_code(outcome), outcome, sqlstate=sqlstate, exception=exception)
            case _:
                assert_never(outcome)

    def refused(self, outcome: RevisionChanged | Inactive | DigestInvalid, part: str) -> None:
        """An admit refused for a reason that does not heal by itself, until an operator
        re-publishes: a diagnostic naming it, and a metric by outcome and part."""
        code = outcome_code(outcome)
        self._metrics.count_refused(code, part)
        self.emit(code, outcome, part=part)

    def emit(
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
        self._sink.emit(
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
