"""The bench's replicas: ``python -m qlsched run`` processes, started, watched and stopped.

Each replica is the product's own command, configured by flags (claim budget, lease,
cadence, stop deadline, ``--http 127.0.0.1:0`` for ``/metrics``, a diagnostics file) and its
runtime DSN in the environment (never argv, which any local user can read). A replica is
ready when it prints its started line (readiness, recovery and the lifecycle passed, HTTP
bound; the line names the address).

Ownership: a ``Fleet`` owns every process it spawns: they are tracked by pid, signalled only
while not yet reaped, and SIGKILLed and reaped when the ``with`` block is left, however it is
left. A guardian process SIGKILLs them should the bench itself die (SIGKILL included), each
only while it is still the very process started (same start time in ``/proc``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import msgspec
import trio

START_TIMEOUT_S = 60.0
STOP_SLACK_S = 5.0
"""Beyond a replica's stop deadline, how long to wait for its exit before SIGKILL."""
HTTP_TIMEOUT_S = 5.0
_STARTED = re.compile(r"replica (\S+) started(?: (http://\S+))?")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")

# Run by ``sys.executable -I -c`` with the read end of a pipe: reads "pid starttime" lines
# until EOF. EOF after "done" is the bench's clean exit (every replica reaped). EOF without
# it means the bench died: SIGKILL each pid still the process it started.
_GUARDIAN = """\
import os, signal, sys
fd, pids, pending, done = int(sys.argv[1]), {}, b"", False
while chunk := os.read(fd, 4096):
    pending += chunk
    *lines, pending = pending.split(b"\\n")
    for line in lines:
        if line == b"done":
            done = True
        elif line:
            pid, ticks = line.split()
            pids[int(pid)] = ticks
if not done:
    for pid, ticks in pids.items():
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                raw = stat.read()
            if raw[raw.rindex(b")") + 2 :].split()[19] == ticks:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass
"""


class ReplicaFailed(RuntimeError):
    """A replica did not start, or exited by itself; the message ends with its log's tail."""


class ReplicaSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The ``qlsched run`` flags every bench replica gets."""

    claim_budget: int
    cadence_ms: int
    lease_ms: int
    stop_timeout_ms: int


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    diagnostics: Path
    http: str | None = None
    """``http://127.0.0.1:PORT`` once started."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: signal.Signals) -> None:
        if self.alive():  # never signal a pid already reaped
            self.proc.send_signal(signum)

    def rss_kib(self) -> int | None:
        """``VmRSS`` of the process (KiB), None once it is gone."""
        return _status_kib(self.pid, "VmRSS")

    def peak_kib(self) -> int | None:
        """``VmHWM`` (peak RSS) of the process (KiB), None once it is gone."""
        return _status_kib(self.pid, "VmHWM")

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def diagnostic_codes(self) -> dict[str, int]:
        """Diagnostic codes the replica wrote (JSON lines), counted."""
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


def _status_kib(pid: int, field: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _start_ticks(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()[19].decode()


class Fleet:
    """The replica processes of one bench run and their guardian (see the module doc)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.replicas: list[Replica] = []
        self._spawned = 0
        self._guardian: subprocess.Popen[bytes] | None = None
        self._guardian_fd: int | None = None

    def __enter__(self) -> Fleet:
        read_fd, write_fd = os.pipe()  # non-inheritable: only the guardian gets read_fd
        try:
            self._guardian = subprocess.Popen(
                [sys.executable, "-I", "-c", _GUARDIAN, str(read_fd)],
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        self._guardian_fd = write_fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill_all()
        for replica in self.replicas:
            replica.proc.wait()
        if self._guardian_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._guardian_fd, b"done\n")
            os.close(self._guardian_fd)
            self._guardian_fd = None
        if self._guardian is not None:
            try:
                self._guardian.wait(10)
            except subprocess.TimeoutExpired:
                self._guardian.kill()
                self._guardian.wait()

    def spawn(self, runtime_dsn: str, settings: ReplicaSettings) -> Replica:
        """Start one ``qlsched run`` process (not yet ready: see ``wait_started``)."""
        self._spawned += 1
        name = f"bench-{self._spawned}"
        log = self.workdir / f"{name}.log"
        diagnostics = self.workdir / f"{name}.diagnostics.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
        env["QLSCHED_DSN"] = runtime_dsn
        argv = [
            sys.executable,
            "-m",
            "qlsched",
            "run",
            "--owner",
            name,
            "--claim-budget",
            str(settings.claim_budget),
            "--lease-ms",
            str(settings.lease_ms),
            "--cadence-ms",
            str(settings.cadence_ms),
            "--stop-timeout-ms",
            str(settings.stop_timeout_ms),
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
                env=env,
                # Its own session: a terminal's Ctrl-C reaches only the bench, which then
                # ends every replica itself, by pid.
                start_new_session=True,
            )
        replica = Replica(name=name, proc=proc, log=log, diagnostics=diagnostics)
        self.replicas.append(replica)
        ticks = _start_ticks(proc.pid)
        if self._guardian_fd is not None and ticks is not None:
            with contextlib.suppress(OSError):
                os.write(self._guardian_fd, f"{proc.pid} {ticks}\n".encode())
        return replica

    def kill_all(self) -> None:
        for replica in self.replicas:
            replica.signal(signal.SIGKILL)


async def wait_started(replicas: list[Replica]) -> None:
    """Until every replica printed its started line; its HTTP address is recorded.

    Raises:
        ReplicaFailed: one exited first, or they were not all ready in ``START_TIMEOUT_S``.
    """
    pending = {r.name: r for r in replicas}
    with trio.move_on_after(START_TIMEOUT_S):
        while pending:
            for name, replica in list(pending.items()):
                text = replica.log.read_text(errors="replace") if replica.log.exists() else ""
                match = next(
                    (m for m in _STARTED.finditer(text) if m.group(1) == name),
                    None,
                )
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
    raise ReplicaFailed(f"replicas not ready within {START_TIMEOUT_S:.0f} s: {names}")


def check_alive(replicas: list[Replica]) -> None:
    """Raise ReplicaFailed when a replica has exited by itself."""
    for r in replicas:
        if not r.alive():
            raise ReplicaFailed(
                f"replica {r.name} exited by itself (code {r.proc.returncode}):\n{r.log_tail()}"
            )


async def stop(replicas: list[Replica], settings: ReplicaSettings) -> list[str]:
    """SIGTERM each replica, wait up to its stop deadline plus slack, SIGKILL those still
    alive. Returns the problems (empty when every one stopped in order with exit 0)."""
    for r in replicas:
        r.signal(signal.SIGTERM)
    budget = settings.stop_timeout_ms / 1000 + STOP_SLACK_S
    problems: list[str] = []

    async def one(r: Replica) -> None:
        if await _wait_exit(r, budget):
            if r.proc.returncode != 0:
                problems.append(f"{r.name} exited with code {r.proc.returncode} on SIGTERM")
            return
        r.signal(signal.SIGKILL)
        await _wait_exit(r, 10)
        problems.append(f"{r.name} did not stop within {budget:.0f} s of SIGTERM: SIGKILLed")

    async with trio.open_nursery() as nursery:
        for r in replicas:
            nursery.start_soon(one, r)
    return problems


async def _wait_exit(replica: Replica, timeout_s: float) -> bool:
    with trio.move_on_after(timeout_s):
        # Popen has no async wait; the fleet must also reap from plain code after trio.run.
        while replica.proc.poll() is None:  # noqa: ASYNC110
            await trio.sleep(0.02)
        return True
    return False


async def metrics(replica: Replica) -> dict[str, float]:
    """The replica's ``/metrics`` samples without labels (``name -> value``); labelled
    samples are summed under their name."""
    if replica.http is None:
        return {}
    url = replica.http + "/metrics"

    def get() -> str:
        # Only the replica's own loopback address, printed by itself: never a user URL.
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            body: bytes = response.read()
        return body.decode("utf-8", errors="replace")

    text = await trio.to_thread.run_sync(get)
    samples: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples[match.group(1)] = samples.get(match.group(1), 0.0) + value
    return samples
