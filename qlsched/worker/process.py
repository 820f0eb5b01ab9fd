"""One job as a child process: argv (no shell unless the task says so), its environment,
its timeout, a bounded tail of its output, and a stop that is SIGTERM then SIGKILL.

The child gets a session of its own, so a stop reaches what it started too (a shell's
children). Its environment is the worker's without ``QLSCHED_*`` (the worker's DSN and
passwords are not the job's business) plus ``QLSCHED_RUN_ID``, ``QLSCHED_IDEMPOTENCY_KEY``,
``QLSCHED_SCHEDULED_FOR`` (ISO 8601, UTC) and ``QLSCHED_ATTEMPT``.

Cancellation: a cancelled ``run_job`` (the worker's stop deadline) stops the child within
``grace_s`` (shielded, bounded) and lets ``Cancelled`` propagate; nothing is finished.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import signal
import subprocess
from collections.abc import Mapping

import trio

from qlsched.core.work import OUTPUT_TAIL_MAX_CHARS, ClaimedRun, JobResult, TaskPayload

READ_CHUNK = 65536


def job_environment(run: ClaimedRun, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment (see the module docstring)."""
    env = dict(os.environ if base is None else base)
    for key in [k for k in env if k.startswith("QLSCHED_") or k == "PGPASSWORD"]:
        del env[key]
    scheduled = dt.datetime.fromtimestamp(run.scheduled_for_ms / 1000, dt.UTC)
    env.update(
        QLSCHED_RUN_ID=run.run_id,
        QLSCHED_IDEMPOTENCY_KEY=run.idempotency_key,
        QLSCHED_SCHEDULED_FOR=scheduled.isoformat(timespec="milliseconds"),
        QLSCHED_ATTEMPT=str(run.attempt_no),
    )
    return env


class _Tail:
    """The last ``limit`` bytes a stream wrote (the rest is dropped as it arrives)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        return b"".join(self.chunks)[-self.limit :].decode("utf-8", "replace")


async def _drain(stream: trio.abc.ReceiveStream | None, tail: _Tail) -> None:
    if stream is None:
        return
    async with stream:
        while data := await stream.receive_some(READ_CHUNK):
            tail.add(bytes(data))


def _signal(process: trio.Process, sig: int) -> None:
    """Signal the child's session (it leads it); the child alone if that is gone."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        if process.returncode is None:
            process.send_signal(sig)


async def stop_process(process: trio.Process, grace_s: float) -> None:
    """SIGTERM, then SIGKILL when it has not exited within ``grace_s``; waits for it."""
    _signal(process, signal.SIGTERM)
    with trio.move_on_after(grace_s):
        await process.wait()
        return
    _signal(process, signal.SIGKILL)
    await process.wait()


def _output(out: _Tail, err: _Tail) -> str | None:
    text = out.text()
    if err.size:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + err.text()
    return text or None


async def run_job(
    payload: TaskPayload,
    env: Mapping[str, str],
    *,
    cancel: trio.Event,
    grace_s: float,
) -> JobResult:
    """Run the task's command to its end, its timeout, or ``cancel``; never raises for the
    job's own failures (they are the result's code)."""
    try:
        argv = payload.argv()
        if not argv:
            raise ValueError("empty command")
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            start_new_session=True,
        )
    except (OSError, ValueError):
        return JobResult(end="failed", code="spawn_failed")
    out, err = _Tail(OUTPUT_TAIL_MAX_CHARS), _Tail(OUTPUT_TAIL_MAX_CHARS)
    code: str = "exited"
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stdout, out)
            nursery.start_soon(_drain, process.stderr, err)
            timeout_s = payload.timeout_ms / 1000 if payload.timeout_ms else float("inf")
            with trio.move_on_after(timeout_s) as timer:
                async with trio.open_nursery() as watch:
                    watch.start_soon(_cancel_on, cancel, watch.cancel_scope)
                    await process.wait()
                    watch.cancel_scope.cancel()
            if cancel.is_set() and process.returncode is None:
                code = "cancelled"
            elif timer.cancelled_caught:
                code = "timeout"
            if process.returncode is None:
                await stop_process(process, grace_s)
    except BaseException:
        with trio.move_on_after(grace_s + 1, shield=True):
            await stop_process(process, grace_s)
        raise
    tail = _output(out, err)
    if code == "cancelled":
        return JobResult(end="cancelled", code="cancelled", output_tail=tail)
    if code == "timeout":
        return JobResult(end="failed", code="timeout", output_tail=tail)
    rc = process.returncode
    if rc == 0:
        return JobResult(end="succeeded", code="succeeded", exit_code=0, output_tail=tail)
    return JobResult(end="failed", code="exit_nonzero", exit_code=rc, output_tail=tail)


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
