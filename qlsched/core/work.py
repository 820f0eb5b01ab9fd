"""The worker's values (docs/contract.md §13): what a claim hands over, what a job ended
with, and the outcomes of the fenced writes. Pure: no I/O, no clock.

A worker holds an Attempt under a lease (token + expiry by the database clock). Heartbeat
and finish are fenced by (attempt, token, not expired): a worker whose lease expired
changes nothing (``LeaseLost``, ``FenceRefused``). A finish whose COMMIT reply was lost is
``FinishUnknown``: the worker never re-sends it; if it did not land, the lease expires and
the Attempt becomes ``lost`` (execution is at least once per Attempt).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Literal

import msgspec

MAX_ATTEMPTS_MAX = 100
RETRY_BACKOFF_MS_MAX = 86_400_000
TIMEOUT_MS_MAX = 7 * 86_400_000
OUTPUT_TAIL_MAX_CHARS = 4096
"""The bounded tail of stdout and stderr kept per Attempt (each stream's last characters)."""

AttemptEnd = Literal["succeeded", "failed", "cancelled"]
RunState = Literal["held", "queued", "running", "succeeded", "failed", "cancelled"]
JobCode = Literal[
    "succeeded",
    "exit_nonzero",
    "timeout",
    "cancelled",
    "spawn_failed",
    "handler_error",
    "no_handler",
    "bad_payload",
    "stopped",
]
"""Why a job ended: the Attempt's ``result`` and the metric label."""


class TaskPayload(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The pinned execution revision's payload, as the worker reads it (fields with their
    defaults are left out of the payload, so digests of older tasks do not change)."""

    command: str
    project: str
    task: str
    executor: str = "remote_worker"
    shell: bool = False
    timeout_ms: Annotated[int, msgspec.Meta(ge=0, le=TIMEOUT_MS_MAX)] = 0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=MAX_ATTEMPTS_MAX)] = 1
    retry_backoff_ms: Annotated[int, msgspec.Meta(ge=0, le=RETRY_BACKOFF_MS_MAX)] = 0

    def argv(self) -> list[str]:
        """The child's argv: split like a POSIX shell would, but run without one unless
        the task says ``shell = true`` (then ``/bin/sh -c COMMAND``)."""
        if self.shell:
            return ["/bin/sh", "-c", self.command]
        return shlex.split(self.command)


def decode_payload(text: str) -> TaskPayload:
    """Raises ``msgspec.ValidationError``/``DecodeError`` on a corrupt payload."""
    return msgspec.json.decode(text, type=TaskPayload)


class ClaimedRun(msgspec.Struct, frozen=True, kw_only=True):
    """One Run a worker claimed: its Attempt is ``running`` under ``lease_token``."""

    attempt_id: str
    run_id: str
    attempt_no: int
    lease_token: str
    lease_expires_at_ms: int
    started_at_ms: int
    project_id: str
    task_id: str
    trigger_id: str
    idempotency_key: str
    scheduled_for_ms: int
    payload: str


class JobResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a job ended with, before the finish writes it."""

    end: AttemptEnd
    code: JobCode
    exit_code: int | None = None
    output_tail: str | None = None


# --- outcomes of the fenced writes --------------------------------------------------------


class _Outcome(msgspec.Struct, frozen=True, tag_field="outcome"):
    pass


class Extended(_Outcome, frozen=True, tag="extended"):
    """The heartbeat held: the lease runs to ``lease_expires_at_ms`` (database clock)."""

    lease_expires_at_ms: int
    cancel_requested: bool


class LeaseLost(_Outcome, frozen=True, tag="lease_lost"):
    """The heartbeat was refused: the lease expired, or the Attempt is not ours any more."""


HeartbeatOutcome = Extended | LeaseLost


class Finished(_Outcome, frozen=True, tag="finished"):
    """The Attempt is recorded; the Run is terminal (``run_state``) or queued again for a
    retry claimable from ``retry_at_ms``."""

    run_state: RunState
    retry_at_ms: int | None = None


class FenceRefused(_Outcome, frozen=True, tag="fence_refused"):
    """The finish changed nothing: the lease expired (another worker may mark it lost)."""


class FinishUnknown(_Outcome, frozen=True, tag="commit_unknown"):
    """The connection was lost during the finish: it may or may not have committed. Never
    re-sent: if it did not land, the lease expires and the Attempt becomes ``lost``."""

    exception: str


FinishOutcome = Finished | FenceRefused | FinishUnknown


class Reaped(msgspec.Struct, frozen=True, kw_only=True):
    """An Attempt whose lease expired, marked ``lost``, and what the retry policy decided."""

    attempt_id: str
    run_id: str
    run_state: RunState
    retry_at_ms: int | None


# --- cancel (admin) -------------------------------------------------------------------------


class CancelledQueued(_Outcome, frozen=True, tag="cancelled"):
    """A queued Run, cancelled at once with its pristine Attempt."""

    run_id: str
    action_id: int


class CancelRequested(_Outcome, frozen=True, tag="cancel_requested"):
    """A running Run: its worker sees the request at the next heartbeat and stops the job."""

    run_id: str
    action_id: int


class AlreadyFinished(_Outcome, frozen=True, tag="already_finished"):
    """Nothing to cancel: the Run is already terminal (or already asked to cancel)."""

    run_id: str
    state: str


class UnknownRun(_Outcome, frozen=True, tag="unknown_run"):
    run_id: str


CancelOutcome = CancelledQueued | CancelRequested | AlreadyFinished | UnknownRun


def tail(text: str, limit: int = OUTPUT_TAIL_MAX_CHARS) -> str:
    """The last ``limit`` characters of ``text`` (a job's output is bounded when kept)."""
    return text[-limit:] if len(text) > limit else text


# --- reading Runs (``qlsched runs``, status) ------------------------------------------------


class AttemptView(msgspec.Struct, frozen=True, kw_only=True):
    attempt_no: int
    state: str
    worker_id: str | None
    started_at_ms: int | None
    finished_at_ms: int | None
    exit_code: int | None
    result: str | None
    error: str | None


class RunView(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    project_id: str
    trigger_id: str
    task_id: str
    state: str
    scheduled_for_ms: int
    idempotency_key: str
    queued_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    cancel_requested: bool
    attempts: list[AttemptView]

    @property
    def duration_ms(self) -> int | None:
        if self.started_at_ms is None or self.finished_at_ms is None:
            return None
        return self.finished_at_ms - self.started_at_ms


RUN_STATES = ("held", "queued", "running", "succeeded", "failed", "cancelled")
