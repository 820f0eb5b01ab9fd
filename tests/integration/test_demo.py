"""``qlsched demo`` end to end, in a subprocess, as a newcomer runs it.

It must verify exactly once (exit 0, "0 duplicates", "0 lost") and leave nothing behind:
no replica, no postgres process, no temporary directory - after a normal run, after SIGINT
(exit 130, promptly), and even after the demo itself is SIGKILLed (the guardians).
Processes are identified by the pids and directories the demo prints, never by name.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SERVER = re.compile(r"embedded PostgreSQL \d+ \(pid (\d+)\) in (\S+)")
REPLICA = re.compile(r"started (replica-\d+) \(pid (\d+)\)")
WORKDIR = re.compile(r"replica logs and diagnostics: (\S+) ")


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (PID 1 here may not reap)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2] not in "ZX"


def _processes_mentioning(text: str) -> list[str]:
    """Live processes whose command line contains ``text`` (a directory the demo made)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _alive(int(entry.name)):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def read_until(self, pattern: str, timeout_s: float) -> str:
        """Read stdout lines until one matches ``pattern``; fail on EOF or timeout."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if re.search(pattern, line):
                return line
        pytest.fail(f"no line matching {pattern!r}; output so far:\n{self.output}")

    def finish(self, timeout_s: float) -> int:
        assert self.proc.stdout is not None
        rest, _ = self.proc.communicate(timeout=timeout_s)
        self.lines += rest.splitlines()
        return self.proc.returncode

    def started(self) -> tuple[list[int], list[str]]:
        """The pids (server, replicas) and directories (server's, replicas') it printed."""
        pids: list[int] = []
        dirs: list[str] = []
        for line in self.lines:
            if m := SERVER.search(line):
                pids.append(int(m.group(1)))
                dirs.append(str(Path(m.group(2)).parent))  # the ephemeral server's temp dir
            if m := REPLICA.search(line):
                pids.append(int(m.group(2)))
            if m := WORKDIR.search(line):
                dirs.append(m.group(1))
        return pids, dirs


@pytest.fixture
def demo() -> Iterator[Callable[..., Demo]]:
    procs: list[Demo] = []

    def start(*args: str) -> Demo:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qlsched", "demo", *args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        d = Demo(proc)
        procs.append(d)
        return d

    yield start
    for d in procs:  # a failed test must not leave its demo running
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def _assert_nothing_left(d: Demo, *, timeout_s: float = 15.0) -> None:
    pids, dirs = d.started()
    assert len(pids) == 4, d.output  # the embedded server and three replicas
    assert len(dirs) == 2, d.output
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        mentions = [m for path in dirs for m in _processes_mentioning(path)]
        remaining = [path for path in dirs if Path(path).exists()]
        if not (alive or mentions or remaining):
            return
        time.sleep(0.1)
    pytest.fail(
        f"left behind: pids {alive}, processes {mentions}, directories {remaining}\n{d.output}"
    )


def test_demo_verifies_exactly_once_and_cleans_up(demo: Callable[..., Demo]) -> None:
    """The demo runs 3 replicas for 12 s, kills one, verifies 0 duplicates and 0 lost, runs
    every queued Run's job with a worker (all succeeded), and exits 0 with every process it
    started gone and its directories removed."""
    started = time.monotonic()
    d = demo("--replicas", "3", "--seconds", "12")
    code = d.finish(timeout_s=120)
    took = time.monotonic() - started
    out = d.output
    assert code == 0, out
    assert "0 duplicates" in out
    assert "0 lost" in out
    assert "RESULT: exactly once held" in out
    assert re.search(r"SIGKILL replica-\d", out), out
    assert re.search(r"stopped replica-\d, replica-\d in order", out), out
    jobs = re.search(r"ran (\d+) queued Runs' commands in [\d.]+ s: (\d+) succeeded$", out, re.M)
    assert jobs is not None, out
    assert int(jobs.group(1)) == int(jobs.group(2)) > 0, out
    assert took < 12 + 45, f"the demo took {took:.0f} s"
    _assert_nothing_left(d, timeout_s=2)


def test_demo_sigint_exits_130_promptly_and_cleans_up(demo: Callable[..., Demo]) -> None:
    """Ctrl-C mid-way: the replicas are killed, the server stopped, exit 130 within seconds."""
    d = demo("--replicas", "3", "--seconds", "30")
    d.read_until(r"^\[\s*2\.\d+s\] runs:", timeout_s=90)
    sent = time.monotonic()
    d.proc.send_signal(signal.SIGINT)
    code = d.finish(timeout_s=30)
    took = time.monotonic() - sent
    assert code == 130, d.output
    assert took < 10, f"exit took {took:.1f} s after SIGINT"
    assert "RESULT" not in d.output
    _assert_nothing_left(d, timeout_s=2)


def test_demo_killed_outright_leaves_nothing(demo: Callable[..., Demo]) -> None:
    """Even a SIGKILLed demo leaves nothing: its guardians kill the replicas and the server."""
    d = demo("--replicas", "3", "--seconds", "30")
    d.read_until(r"^\[\s*1\.\d+s\] runs:", timeout_s=90)
    d.proc.kill()
    d.finish(timeout_s=10)
    _assert_nothing_left(d, timeout_s=20)
