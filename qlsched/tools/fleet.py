"""Replica processes (``python -m qlsched run``), started, signalled and reaped by their owner.

Why it exists: ``qlsched demo`` and ``qlsched bench`` both run their replicas as separate
processes, the product's own command, so that a crash is real (a SIGKILL, not a cancelled
task: no goodbye, no release, locks left to their lease) and nothing is shared but the
database. This module is the one copy of what that takes.

Ownership: a ``Fleet`` owns every process it spawns: they are tracked by pid, signalled only
while not yet reaped, and SIGKILLed and reaped when the ``with`` block is left, however it is
left. A guardian process (``qlsched.embedded.guardian``, shared with the embedded server)
makes sure none outlives its owner even when the owner itself is SIGKILLed: it SIGKILLs
each replica that is still the very process started (same pid and start time in ``/proc``,
so a recycled pid is never hit), and, if asked, removes the work directory.

Secrets: a replica's runtime DSN goes through its environment (``QLSCHED_DSN``), never argv,
which any local user can read.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Self, TypeVar

import msgspec
import trio

from qlsched.embedded.guardian import Guardian

_STARTED = re.compile(r"replica (\S+) started(?: (http://\S+))?")


class ReplicaFailed(RuntimeError):
    """A replica did not start, or exited by itself; the message ends with its log's tail."""


@dataclass
class Replica:
    """One ``qlsched run`` process, its log (stdout and stderr) and its diagnostics file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    diagnostics: Path
    http: str | None = None
    """``http://127.0.0.1:PORT`` once started."""
    ended: str = ""
    """How it ended, once it has: 'stopped in order', 'SIGKILL: ...', ..."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: signal.Signals) -> None:
        if self.alive():  # never signal a pid already reaped
            self.proc.send_signal(signum)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def diagnostic_codes(self) -> dict[str, int]:
        """Diagnostic codes the replica wrote (JSON lines, one per problem), counted."""
        counts: dict[str, int] = {}
        try:
            lines = self.diagnostics.read_bytes().splitlines()
        except OSError:
            return counts
        for line in lines:
            try:
                code = str(msgspec.json.decode(line).get("code", "?"))
            except (msgspec.DecodeError, AttributeError):
                code = "?"
            counts[code] = counts.get(code, 0) + 1
        return counts


R = TypeVar("R", bound=Replica)


class Fleet(Generic[R]):
    """The replica processes of one owner and their guardian (see the module doc).

    ``kind`` is the class each spawned replica is made as (``Replica`` or a subclass with
    the owner's own fields). ``guardian_removes_workdir``: should the owner die, the guardian
    also removes ``workdir`` (on a clean exit the owner removes it itself).
    """

    def __init__(
        self, workdir: Path, kind: type[R], *, guardian_removes_workdir: bool = False
    ) -> None:
        self.workdir = workdir
        self.replicas: list[R] = []
        self._kind = kind
        self._guardian_removes_workdir = guardian_removes_workdir
        self._guardian: Guardian | None = None

    def __enter__(self) -> Self:
        remove = [self.workdir] if self._guardian_removes_workdir else []
        self._guardian = Guardian(first_signal=signal.SIGKILL, remove=remove)
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
        for replica in self.replicas:
            replica.proc.wait()
        if self._guardian is not None:
            self._guardian.retire()
            self._guardian = None

    def spawn(
        self,
        owner: str,
        runtime_dsn: str,
        flags: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> R:
        """Start ``qlsched run --owner OWNER FLAGS --http 127.0.0.1:0 --diagnostics FILE``
        (not yet ready: it is once its log has the started line). Its environment: ours
        without any ``QLSCHED_*`` variable, then ``QLSCHED_DSN`` and ``env``. Its log and
        diagnostics are ``OWNER.log`` and ``OWNER.diagnostics.jsonl`` in the work directory.
        """
        log = self.workdir / f"{owner}.log"
        diagnostics = self.workdir / f"{owner}.diagnostics.jsonl"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
        environ["QLSCHED_DSN"] = runtime_dsn  # not argv: see the module doc
        environ.update(env or {})
        argv = [
            sys.executable,
            "-m",
            "qlsched",
            "run",
            "--owner",
            owner,
            *flags,
            "--http",
            "127.0.0.1:0",
            "--diagnostics",
            str(diagnostics),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environ,
                # Its own session: a terminal's Ctrl-C reaches only the owner, which then
                # ends every replica itself, by pid.
                start_new_session=True,
            )
        replica = self._kind(name=owner, proc=proc, log=log, diagnostics=diagnostics)
        self.replicas.append(replica)
        if self._guardian is not None:
            self._guardian.announce(proc.pid)
        return replica

    def kill_all(self) -> None:
        for replica in self.replicas:
            replica.signal(signal.SIGKILL)

    def alive(self) -> list[R]:
        return [r for r in self.replicas if r.alive()]


async def wait_exit(replica: Replica, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the process to exit (and reap it); True if it did."""
    with trio.move_on_after(timeout_s):
        # Popen has no async wait (trio.Process has, but the fleet must also be reaped by
        # plain code after trio.run); polling a pid every 20 ms costs nothing.
        while replica.proc.poll() is None:  # noqa: ASYNC110
            await trio.sleep(0.02)
        return True
    return False


async def wait_started(replicas: Sequence[Replica], timeout_s: float) -> None:
    """Until every replica printed its started line (readiness, recovery and the lifecycle
    passed, HTTP bound); its HTTP address is recorded.

    Raises:
        ReplicaFailed: one exited first, or they were not all ready within ``timeout_s``.
    """
    pending = {r.name: r for r in replicas}
    with trio.move_on_after(timeout_s):
        while pending:
            for name, replica in list(pending.items()):
                text = replica.log.read_text(errors="replace") if replica.log.exists() else ""
                match = next((m for m in _STARTED.finditer(text) if m.group(1) == name), None)
                if match is not None:
                    replica.http = match.group(2)
                    del pending[name]
                elif not replica.alive():
                    raise ReplicaFailed(
                        f"replica {name} exited during start (code {replica.proc.returncode}):\n"
                        + replica.log_tail()
                    )
            if pending:
                await trio.sleep(0.05)
        return
    names = ", ".join(sorted(pending))
    raise ReplicaFailed(f"replicas not ready within {timeout_s:.0f} s: {names}")


def check_alive(replicas: Sequence[Replica]) -> None:
    """Raise ReplicaFailed when a replica has exited by itself."""
    for r in replicas:
        if not r.alive():
            raise ReplicaFailed(
                f"replica {r.name} exited by itself (code {r.proc.returncode}):\n{r.log_tail()}"
            )


async def stop_in_order(replicas: Sequence[Replica], budget_s: float) -> list[str]:
    """SIGTERM each replica, wait up to ``budget_s`` for each, SIGKILL those still alive;
    each one's ``ended`` says how it went. Returns the problems (empty when every one
    stopped in order with exit 0)."""
    for r in replicas:
        r.signal(signal.SIGTERM)
    problems: list[str] = []

    async def one(r: Replica) -> None:
        if await wait_exit(r, budget_s):
            code = r.proc.returncode
            r.ended = "stopped in order" if code == 0 else f"exited with code {code}"
            if code != 0:
                problems.append(f"{r.name} exited with code {code} on SIGTERM")
            return
        r.signal(signal.SIGKILL)
        await wait_exit(r, 10)
        r.ended = "SIGKILL: did not stop within its deadline"
        problems.append(f"{r.name} did not stop within {budget_s:.0f} s of SIGTERM: SIGKILLed")

    async with trio.open_nursery() as nursery:
        for r in replicas:
            nursery.start_soon(one, r)
    return problems
