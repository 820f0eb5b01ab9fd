"""Trigger-now and backfill requests: their limits, a backfill's chunks, and the outcomes.

A request is recorded by an operator (admin role) and admitted by a replica under the same
fence rules as a schedule row (docs/contract.md §10). What is pure lives here: how many
occurrences a backfill range holds (counted, never stepped through), which occurrences the
next chunk admits, and the typed outcome of one request's admit.

A backfill's occurrences are the trigger's own: ``cron.next_after`` and
``cron_count.count_between``, the functions every cron decision uses, so a DST policy
there applies here unchanged. A chunk never reaches the trigger's cron cursor: occurrences
at or after it are cron's to fire, skip or count, and a backfill that reaches it waits for
cron to move on (then admits what cron did not).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Final, Literal, Protocol

import msgspec

from qlsched.core.control import ControlError
from qlsched.core.cron import CronSchedule, DstFold, DstGap, next_after, parse_cron
from qlsched.core.cron_count import count_between
from qlsched.core.fence import ClaimFence

BACKFILL_MAX_DEFAULT: Final = 10_000
"""Occurrences a backfill may hold unless ``--max`` says otherwise."""
BACKFILL_MAX_HARD_CAP: Final = 1_000_000
"""No ``--max`` may exceed this."""
EPOCH_MS_MAX: Final = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the last instant a range may name (a datetime's own limit)."""

RequestKind = Literal["trigger", "backfill"]
RequestOverlap = Literal["allow"]
"""What a request may ask instead of its trigger's overlap policy (None: the policy)."""
RefusedReason = Literal[
    "trigger_missing",
    "trigger_disabled",
    "project_archived",
    "revision_changed",
    "digest_invalid",
    "count_mismatch",
    "failed_repeatedly",
    "before_retention",
]
"""Why a request was refused: at once when recorded, or by the replica that would admit it
(the trigger changed, was disabled or archived, or does not verify since it was asked; a
chunk would count past the recorded total, as when the recorder's and the replica's zone
data disagree; its admit failed ``REQUEST_FAILURES_MAX`` times in a row; or a backfill
reaches back over Runs retention deleted, when recorded or, if retention caught up with it
since, when a chunk would be admitted)."""

REQUEST_FAILURES_MAX: Final = 5
"""Admits of one request that may fail in a row (each after its own retries) before the
request is refused ``failed_repeatedly``: never retried forever in silence."""


def check_range(from_ms: int, to_ms: int, max_occurrences: int) -> None:
    """Raise ``ControlError`` for a range outside 1970..9999, a backwards range, or a
    ``max`` out of bounds: checked once where a range enters (either profile), so no driver
    or cron code sees such a number."""
    for what, ms in (("start", from_ms), ("end", to_ms)):
        if not 0 <= ms <= EPOCH_MS_MAX:
            raise ControlError(f"{what}: {ms} is outside 1970-01-01 .. 9999-12-31 (epoch ms)")
    if from_ms > to_ms:
        raise ControlError("the range's start is after its end")
    if (
        not isinstance(max_occurrences, int)
        or isinstance(max_occurrences, bool)
        or not 1 <= max_occurrences <= BACKFILL_MAX_HARD_CAP
    ):
        raise ControlError(f"max: must be 1 to {BACKFILL_MAX_HARD_CAP:,}")


def backfill_count(cron: CronSchedule, from_ms: int, to_ms: int) -> int:
    """Occurrences ``t`` with ``from_ms <= t <= to_ms``, counted exactly, not visited."""
    if to_ms < from_ms:
        return 0
    return count_between(cron, from_ms - 1, to_ms)


class Chunk(msgspec.Struct, frozen=True):
    """The next occurrences of a backfill to admit, and where its cursor goes."""

    occurrences: list[int]
    cursor_ms: int | None
    """The last occurrence of this chunk (the request's progress after it), or the old
    cursor when the chunk is empty."""
    done: bool
    """No occurrence of the range is left after this chunk."""
    next_ms: int | None = None
    """The first occurrence of the range not in this chunk (what a waiting backfill waits
    for: the claim takes it again once cron's cursor is past it); None when done."""


def first_occurrence(cron: CronSchedule, from_ms: int) -> int:
    """A backfill's first occurrence: the first at or after ``from_ms`` (maybe past its end)."""
    return next_after(cron, from_ms - 1)


def backfill_chunk(
    cron: CronSchedule,
    *,
    from_ms: int,
    to_ms: int,
    cursor_ms: int | None,
    below_ms: int,
    limit: int,
) -> Chunk:
    """Up to ``limit`` occurrences after the request's cursor (or from ``from_ms``), none
    after ``to_ms`` and none at or after ``below_ms`` (the trigger's cron cursor: cron's)."""
    t = from_ms - 1 if cursor_ms is None else cursor_ms
    out: list[int] = []
    while len(out) < max(1, limit):
        t = next_after(cron, t)
        if t > to_ms:
            return Chunk(out, out[-1] if out else cursor_ms, True)
        if t >= below_ms:
            return Chunk(out, out[-1] if out else cursor_ms, False, next_ms=t)
        out.append(t)
    following = next_after(cron, out[-1])
    done = following > to_ms
    return Chunk(out, out[-1], done, next_ms=None if done else following)


class RequestIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """What names a request from the moment it is recorded (database times)."""

    request_id: uuid.UUID
    project_id: str
    trigger_id: str
    trigger_revision: int
    """The revision the request was made for."""
    kind: RequestKind
    created_at_ms: int
    """When it was recorded: a trigger-now Run's ``scheduled_for``."""


class RequestClaim(RequestIdentity, frozen=True, kw_only=True):
    """One claimed request, as the claim statement returned it (database times)."""

    from_ms: int | None
    to_ms: int | None
    cursor_ms: int | None
    fence: ClaimFence
    claimed_at_ms: int
    current_revision: int
    """The trigger's revision now: another one and the admit refuses the request."""
    cron: str
    timezone: str
    dst_gap: DstGap
    dst_fold: DstFold
    trigger_digest: str
    task_revision: int
    execution_revision_id: uuid.UUID
    schedule_cursor_ms: int | None
    """The trigger's cron cursor when claimed; a chunk stays before it (re-checked)."""


class RequestClaims(msgspec.Struct, frozen=True):
    """What one request claim statement returned."""

    any_pending: bool
    """Some request was pending when it ran (claimed by anyone): look again next round."""
    claims: list[RequestClaim]


class RequestChunk(msgspec.Struct, frozen=True):
    """What one admit sends for a claimed request: its occurrences with their keys and
    minted ids (only here, only for these), and where the request's cursor goes."""

    claim: RequestClaim
    occurrences: list[int]
    keys: list[str]
    run_ids: list[uuid.UUID]
    attempt_ids: list[uuid.UUID]
    cursor_ms: int | None
    done: bool
    next_ms: int | None = None
    """A backfill's next occurrence after this chunk (see ``Chunk.next_ms``)."""


class RequestStore(Protocol):
    """The port the requests pass drives (the PostgreSQL adapter implements it)."""

    async def claim(self, owner: str, limit: int, lease_ms: int) -> RequestClaims:
        """Claim up to ``limit`` pending requests, each under a fresh fence."""
        ...

    async def admit(self, chunk: RequestChunk) -> RequestOutcome:
        """Admit one chunk under its claim's fence (an empty one releases the claim)."""
        ...


# --- what recording a request says ----------------------------------------------------------


class Recorded(RequestIdentity, frozen=True, kw_only=True):
    """A request stored (pending); a replica admits it."""

    requested_by: str
    total: int | None = None
    """A backfill's occurrences in its range (exact)."""


NotRecordedReason = Literal[
    "trigger_missing",
    "trigger_disabled",
    "project_archived",
    "too_many",
    "future",
    "before_retention",
]


class NotRecorded(msgspec.Struct, frozen=True):
    """A request refused at once: nothing was stored."""

    project_id: str
    trigger_id: str
    reason: NotRecordedReason
    count: int | None = None
    """``too_many``: the occurrences the range holds."""
    max: int | None = None
    horizon_ms: int | None = None
    """``before_retention``: the earliest start allowed: the retention horizon, or just
    after the latest occurrence retention deleted, by the database's clock."""

    @property
    def bad_input(self) -> bool:
        """The request itself must change (exit 2); else the trigger's state refuses it."""
        return self.reason in ("trigger_missing", "too_many", "future", "before_retention")

    def message(self) -> str:
        name = f"{self.project_id}/{self.trigger_id}"
        match self.reason:
            case "trigger_missing":
                return f"{name}: no such trigger (publish it first)"
            case "trigger_disabled":
                return f"{name}: refused: the trigger is disabled"
            case "project_archived":
                return f"{name}: refused: project {self.project_id} is archived"
            case "too_many":
                return (
                    f"{name}: refused: the range holds {self.count:,} occurrences, more than"
                    f" --max {self.max:,}"
                )
            case "future":
                return f"{name}: refused: --to is later than the database's time now"
            case "before_retention":
                return (
                    f"{name}: refused: --from is before the retention horizon"
                    f" {_utc(self.horizon_ms)}: Runs that ended before it are deleted, so"
                    " their occurrences would run again (qlsched retention show)"
                )
        raise AssertionError(self.reason)


RecordResult = Recorded | NotRecorded


class RequestAsk(msgspec.Struct, frozen=True, kw_only=True):
    """What an operator asks for, as both profiles record it: a trigger-now (no ``span``)
    or a backfill of ``span`` (epoch ms, inclusive) counted against ``max_occurrences``;
    ``note`` and ``actor`` go on the request and its audit row, ``overlap="allow"`` admits
    it whatever the trigger's overlap policy says. Checked by the caller before."""

    kind: RequestKind
    note: str | None = None
    actor: str | None = None
    span: tuple[int, int] | None = None
    max_occurrences: int | None = None
    overlap: RequestOverlap | None = None


class RequestTarget(msgspec.Struct, frozen=True):
    """What a new request is checked against, as the store read it inside the recording
    transaction: the trigger's revision, state and spec, and its project's state."""

    revision: int
    enabled: bool
    project_state: str
    cron: str
    timezone: str
    dst_gap: DstGap
    dst_fold: DstFold


def record_check(
    project_id: str,
    trigger_id: str,
    target: RequestTarget | None,
    now_ms: int,
    span: tuple[int, int] | None = None,
    max_occurrences: int | None = None,
    *,
    earliest_ms: int | None = None,
) -> NotRecorded | tuple[int | None, int | None]:
    """Why a request is refused before anything is written (both profiles), or a
    backfill's exact (total, first occurrence); (None, None) for a trigger-now.
    ``earliest_ms``: the earliest start retention allows (the cluster's; None: any)."""
    if target is None:
        return NotRecorded(project_id, trigger_id, "trigger_missing")
    if target.project_state != "active":
        return NotRecorded(project_id, trigger_id, "project_archived")
    if not target.enabled:
        return NotRecorded(project_id, trigger_id, "trigger_disabled")
    if span is None:
        return None, None
    assert max_occurrences is not None
    if span[1] > now_ms:
        return NotRecorded(project_id, trigger_id, "future")
    if earliest_ms is not None and span[0] < earliest_ms:
        return NotRecorded(project_id, trigger_id, "before_retention", horizon_ms=earliest_ms)
    cron = parse_cron(
        target.cron, target.timezone, dst_gap=target.dst_gap, dst_fold=target.dst_fold
    )
    total = backfill_count(cron, *span)
    if total > max_occurrences:
        return NotRecorded(project_id, trigger_id, "too_many", count=total, max=max_occurrences)
    return total, first_occurrence(cron, span[0])


class RequestView(msgspec.Struct, frozen=True):
    """One trigger-now or backfill request and its progress (``done`` of ``total``), as
    ``status`` and ``edge status`` show it."""

    request_id: uuid.UUID
    project_id: str
    trigger_id: str
    trigger_revision: int
    kind: str
    note: str | None
    actor: str | None
    requested_by: str
    created_at_ms: int
    state: str
    refused_reason: str | None
    done_at_ms: int | None
    from_ms: int | None
    to_ms: int | None
    total: int | None
    cursor_ms: int | None
    admitted: int
    already_admitted: int
    """Occurrences whose key already had a Run (cron admitted them, or an earlier request)."""
    claim_owner: str | None
    """The replica whose lease holds it (always None on the Edge: no lease)."""
    failures: int = 0
    """Admits of it that failed in a row (refused ``failed_repeatedly`` at the bound)."""
    last_failure: str | None = None
    held: bool = False
    """Pending for a paused trigger: it takes no claim slot and runs after resume."""
    overlap_skipped: int = 0
    """Occurrences the trigger's overlap policy gave no Run (one of it was unfinished)."""

    @property
    def done(self) -> int:
        return self.admitted + self.already_admitted + self.overlap_skipped


def _utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --- outcomes of one request's admit ------------------------------------------------------


class _RequestOutcome(msgspec.Struct, frozen=True, tag_field="outcome"):
    request_id: uuid.UUID
    project_id: str
    trigger_id: str


class RequestAdmitted(_RequestOutcome, frozen=True, tag="request_admitted"):
    """The chunk (or the one trigger-now Run) committed with the request's cursor."""

    admitted: int
    already_admitted: int
    """Occurrences whose key was already taken (cron or an earlier request admitted them)."""
    done: bool
    overlap_skipped: int = 0
    """Occurrences the trigger's overlap policy gave no Run (a Run of it was unfinished)."""


class RequestWaiting(_RequestOutcome, frozen=True, tag="request_waiting"):
    """A backfill whose next occurrence is not behind the cron cursor yet: released."""


class RequestHeld(_RequestOutcome, frozen=True, tag="request_held"):
    """The trigger is paused: nothing admitted, the claim released; it runs after resume."""


class RequestRefused(_RequestOutcome, frozen=True, tag="request_refused"):
    reason: RefusedReason


class RequestFenceLost(_RequestOutcome, frozen=True, tag="request_fence_lost"):
    """The claim no longer holds (a takeover, the lease expired, the cursor moved)."""


class RequestCommitUnknown(_RequestOutcome, frozen=True, tag="request_commit_unknown"):
    """The reply was lost: never re-sent; the lease expires and the key decides."""

    exception: str


class RequestFailed(_RequestOutcome, frozen=True, tag="request_failed"):
    """Retries exhausted or another database error: the claim is given back at once and
    the failure counted (refused after ``REQUEST_FAILURES_MAX`` in a row)."""

    sqlstate: str | None
    exception: str | None


RequestOutcome = (
    RequestAdmitted
    | RequestWaiting
    | RequestHeld
    | RequestRefused
    | RequestFenceLost
    | RequestCommitUnknown
    | RequestFailed
)
