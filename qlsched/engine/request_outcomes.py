"""What a requests pass does with each admit's outcome, on both profiles: count it (one
family per measure: ``qlsched_request_outcomes_total{code}``,
``qlsched_request_occurrences_total{result}``) and report what an operator must see (a
refusal, a failed admit) as a diagnostic. The stores only answer; the passes report here."""

from __future__ import annotations

from typing import Final, Protocol, assert_never

from qlsched.core import requests as rq
from qlsched.core.diagnostics import Diagnostic, DiagnosticSink

REQUEST_CODES: Final = (
    "request_admitted",
    "request_waiting",
    "request_held",
    "request_refused",
    "request_fence_lost",
    "request_commit_unknown",
    "request_failed",
)
OCCURRENCE_RESULTS: Final = ("admitted", "already_admitted", "overlap_skipped")


class RequestMetrics(Protocol):
    def count_request(self, code: str, occurrences: dict[str, int]) -> None:
        """One admit's outcome code, and its occurrences by result (admitted only)."""
        ...


def report_request(
    outcome: rq.RequestOutcome, *, owner: str, sink: DiagnosticSink, metrics: RequestMetrics
) -> None:
    code = outcome.__struct_config__.tag
    assert isinstance(code, str)
    occurrences: dict[str, int] = {}
    match outcome:
        case rq.RequestAdmitted(admitted=admitted, already_admitted=already, overlap_skipped=skip):
            occurrences = dict(zip(OCCURRENCE_RESULTS, (admitted, already, skip), strict=True))
        case rq.RequestRefused(reason=reason):
            _emit(sink, "request_refused", outcome, owner, part=reason)
        case rq.RequestFailed(sqlstate=state, exception=exception):
            _emit(sink, "request_failed", outcome, owner, sqlstate=state, exception=exception)
        case (
            rq.RequestWaiting()
            | rq.RequestHeld()
            | rq.RequestFenceLost()
            | rq.RequestCommitUnknown()
        ):
            pass
        case _:
            assert_never(outcome)
    metrics.count_request(code, occurrences)


def _emit(
    sink: DiagnosticSink,
    code: str,
    outcome: rq.RequestOutcome,
    owner: str,
    *,
    part: str | None = None,
    sqlstate: str | None = None,
    exception: str | None = None,
) -> None:
    sink.emit(
        Diagnostic(
            code=code,
            replica=owner,
            project_id=outcome.project_id,
            trigger_id=outcome.trigger_id,
            part=part,
            sqlstate=sqlstate,
            exception=exception,
        )
    )
