"""What one admit of a claimed request sends, for both profiles: the one rule, pure.

A trigger-now request is one Run under its own key (``keys.manual_key``, scheduled for when
it was recorded; the cron cursor does not move). A backfill is up to ``limit`` of its next
occurrences under their cron keys (``keys.idempotency_key``, the key cron would use, so
cron and a backfill can never both admit one occurrence), never at or past the trigger's
cron cursor. A NULL cron cursor means cron has not decided where this revision starts (a
new or re-published revision, a trigger paused before its first claim): nothing is the
backfill's yet, since "before now" would let the cursor later land on a taken key. A claim
of another revision sends an empty chunk: the store refuses the request.
"""

from __future__ import annotations

from collections.abc import Callable

from qlsched.core.cron import CronSchedule
from qlsched.core.diagnostics import Diagnostic, DiagnosticSink
from qlsched.core.keys import idempotency_key, manual_key, new_id
from qlsched.core.requests import RequestChunk, RequestClaim, backfill_chunk
from qlsched.core.spec_cache import InvalidSpec, Lru, build_cron


def minted_chunk(
    claim: RequestClaim,
    occurrences: list[int],
    keys: list[str],
    *,
    cursor_ms: int | None,
    done: bool,
    next_ms: int | None = None,
) -> RequestChunk:
    """A chunk with its Run and Attempt ids minted (fresh per try; the keys decide)."""
    return RequestChunk(
        claim=claim,
        occurrences=occurrences,
        keys=keys,
        run_ids=[new_id(claim.fence.owner) for _ in occurrences],
        attempt_ids=[new_id(claim.fence.owner) for _ in occurrences],
        cursor_ms=cursor_ms,
        done=done,
        next_ms=next_ms,
    )


def request_chunk(
    claim: RequestClaim, limit: int, cron_of: Callable[[RequestClaim], CronSchedule | None]
) -> RequestChunk | None:
    """The occurrences to admit for ``claim``, at most ``limit``; None when a backfill's
    cron cannot be built (``cron_of`` said None, and reported why)."""
    if claim.current_revision != claim.trigger_revision:
        return minted_chunk(claim, [], [], cursor_ms=claim.cursor_ms, done=False)
    if claim.kind == "trigger":
        key = manual_key(claim.trigger_id, claim.trigger_revision, claim.request_id)
        return minted_chunk(claim, [claim.created_at_ms], [key], cursor_ms=None, done=True)
    cron = cron_of(claim)
    if cron is None or claim.from_ms is None or claim.to_ms is None:
        return None
    below = claim.schedule_cursor_ms if claim.schedule_cursor_ms is not None else -1
    picked = backfill_chunk(
        cron,
        from_ms=claim.from_ms,
        to_ms=claim.to_ms,
        cursor_ms=claim.cursor_ms,
        below_ms=below,
        limit=limit,
    )
    keys = [
        idempotency_key(claim.trigger_id, claim.trigger_revision, t) for t in picked.occurrences
    ]
    return minted_chunk(
        claim,
        picked.occurrences,
        keys,
        cursor_ms=picked.cursor_ms,
        done=picked.done,
        next_ms=picked.next_ms,
    )


class RequestCrons:
    """The parsed crons of claimed backfills (an LRU by what a cron is built from); a
    spec that cannot be built is reported (``spec_invalid``) and gives None."""

    def __init__(self, sink: DiagnosticSink, owner: str, size: int = 1024) -> None:
        self._crons: Lru[tuple[str, str, str, str], CronSchedule | InvalidSpec] = Lru(size)
        self._sink = sink
        self._owner = owner

    def __call__(self, claim: RequestClaim) -> CronSchedule | None:
        cron = self._crons.get(
            (claim.cron, claim.timezone, claim.dst_gap, claim.dst_fold),
            lambda: build_cron(claim.cron, claim.timezone, claim.dst_gap, claim.dst_fold),
        )
        if isinstance(cron, InvalidSpec):
            self._sink.emit(
                Diagnostic(
                    code="spec_invalid",
                    replica=self._owner,
                    project_id=claim.project_id,
                    trigger_id=claim.trigger_id,
                    exception=cron.exception,
                )
            )
            return None
        return cron
