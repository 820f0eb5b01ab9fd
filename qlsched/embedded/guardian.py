"""The guardian: a process that ends what its owner started should the owner die first.

Used by the embedded server (its postmaster and temporary directory) and by the tools'
fleet (its replica processes and work directory): one copy of the protocol. The owner
writes ``PID STARTTIME`` lines on a pipe as it starts processes and ``done`` once it has
ended them itself. EOF without ``done`` means the owner died, however (SIGKILL included):
the guardian signals each announced process that is still the very process started (same
start time in ``/proc``, so a recycled pid is never hit), escalates to SIGKILL after a
grace period, and removes the directories it was given.

A pipe rather than ``prctl(PR_SET_PDEATHSIG)``: that signal follows the *thread* that
forked, so a process started from a worker thread (``trio.to_thread``) would die when that
thread idles out; and it needs ``preexec_fn``, unsafe with threads. A separate process can
also remove a directory, which a dying child cannot.

This file imports only the standard library: the guardian runs it as a script with
``python -I``, outside the package. The ``/proc`` readers the rest of ``qlsched.embedded``
uses live here for that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

GRACE_S = 10.0
"""After the first signal, how long the guardian (or a stop) waits before SIGKILL."""


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot); None if gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def read_pidfile(data_dir: Path) -> list[str] | None:
    """The lines of ``postmaster.pid`` in ``data_dir``; None when there is none."""
    try:
        return (data_dir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None


def postmaster_state(pid: int, data_dir: Path) -> Literal["ours", "other", "unknown"]:
    """Whether ``pid`` is a live postmaster of ``data_dir`` ("ours"), provably not ("other"),
    or cannot be told (an unreadable /proc entry: another user's process, or no /proc)."""
    if pid <= 0:
        return "other"
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "other" if Path("/proc/self/stat").exists() else "unknown"
    except OSError:
        return "unknown"
    if raw[raw.rindex(")") + 2] in "ZX":
        return "other"
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return "other"
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return "unknown"
    # The postmaster's working directory is its data directory (it chdirs there).
    return "ours" if cwd == str(data_dir.resolve()) else "other"


def terminate(pid: int, ticks: int | None, first: signal.Signals, grace_s: float) -> None:
    """Signal a process that is not our child and wait until it is gone (zombies count):
    ``first``, then SIGQUIT, then SIGKILL, each only while it is still the same process."""
    for sig, wait_s in ((first, grace_s), (signal.SIGQUIT, GRACE_S)):
        if start_ticks(pid) != ticks:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if start_ticks(pid) != ticks:
                return
            time.sleep(0.01)
    if start_ticks(pid) == ticks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Guardian:
    """The owner's end: a guardian process and the pipe to it.

    Ownership: the owner calls ``announce`` for each process it starts and ``retire`` once
    it has ended them all (the guardian then exits doing nothing). A forked child calls
    ``disown``: its copy of the pipe closes without keeping the guardian waiting.
    """

    def __init__(
        self,
        *,
        first_signal: signal.Signals,
        remove: Sequence[Path] = (),
        postmaster_of: Path | None = None,
    ) -> None:
        """Start the guardian. ``first_signal``: what each announced process gets first
        (SIGKILL, or SIGQUIT for PostgreSQL's immediate stop); ``remove``: directories to
        delete; ``postmaster_of``: a data directory whose running postmaster (from its
        ``postmaster.pid``, checked in ``/proc``) is ended too, announced or not."""
        read_fd, write_fd = os.pipe()  # both non-inheritable: only the guardian gets read_fd
        argv = [sys.executable, "-I", str(Path(__file__).resolve()), str(read_fd)]
        argv += ["--signal", first_signal.name]
        for directory in remove:
            argv += ["--remove", str(directory)]
        if postmaster_of is not None:
            argv += ["--postmaster-of", str(postmaster_of)]
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                argv,
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                # Not our stderr: when we die, writing to a closed pipe would abort its work.
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # a terminal's Ctrl-C is the owner's to handle
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        self._fd: int | None = write_fd

    def announce(self, pid: int) -> None:
        """Hand the guardian a process to end should the owner die. A guardian that is gone
        only loses that case: the owner still ends its processes itself."""
        ticks = start_ticks(pid)
        if self._fd is None or ticks is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._fd, f"{pid} {ticks}\n".encode())

    def retire(self, *, done: bool = True) -> None:
        """Close the pipe and reap the guardian. ``done``: the owner ended everything, so
        the guardian exits doing nothing; otherwise (a stop that failed) it does its work
        now. Idempotent."""
        if self._fd is not None:
            if done:
                with contextlib.suppress(OSError):
                    os.write(self._fd, b"done\n")
            os.close(self._fd)
            self._fd = None
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def disown(self) -> None:
        """In a forked child: forget the guardian (the parent still owns it)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        if self._proc is not None and self._proc.returncode is None:
            # Not this process's child: Popen must neither reap nor warn about it.
            self._proc.returncode = 0
        self._proc = None


def _main(argv: Sequence[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fd = int(argv[0])
    first = signal.SIGKILL
    remove: list[Path] = []
    postmaster_of: Path | None = None
    options = list(argv[1:])
    while options:
        flag, value = options.pop(0), options.pop(0)
        if flag == "--signal":
            first = signal.Signals[value]
        elif flag == "--remove":
            remove.append(Path(value))
        elif flag == "--postmaster-of":
            postmaster_of = Path(value)
    announced: dict[int, int] = {}
    pending, done = b"", False
    while chunk := os.read(fd, 4096):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line == b"done":
                done = True
            elif line:
                pid_text, _, ticks_text = line.decode().partition(" ")
                announced[int(pid_text)] = int(ticks_text)
    if done:
        return 0
    targets = {pid: ticks for pid, ticks in announced.items() if start_ticks(pid) == ticks}
    if postmaster_of is not None:
        with contextlib.suppress(Exception):
            pid = int((read_pidfile(postmaster_of) or ["0"])[0])
            if postmaster_state(pid, postmaster_of) == "ours" and pid not in targets:
                targets[pid] = start_ticks(pid) or 0
    for pid, ticks in targets.items():
        with contextlib.suppress(Exception):
            terminate(pid, ticks, first, GRACE_S)
    for directory in remove:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
