"""``python -m qlsched work`` as a real process for the worker's fault tests: started with
its own DSN, signalled only by its own pid (SIGTERM, SIGKILL, SIGSTOP/SIGCONT), its stderr
kept in a file the test reads."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """Ownership: the test that starts it stops it (``stop``/``kill``) in a ``finally``."""

    def __init__(
        self,
        name: str,
        dsn: str,
        workdir: Path,
        *,
        lease_ms: int = 3_000,
        stop_timeout_ms: int = 1_000,
        concurrency: int = 4,
        extra: list[str] | None = None,
    ) -> None:
        self.extra = list(extra or [])
        self.name = name
        self.dsn = dsn
        self.lease_ms = lease_ms
        self.stop_timeout_ms = stop_timeout_ms
        self.concurrency = concurrency
        self.log_path = workdir / f"{name}.log"
        self.out_path = workdir / f"{name}.out"
        self.proc: trio.Process | None = None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "qlsched",
            "work",
            "--dsn",
            self.dsn,
            "--worker-id",
            self.name,
            "--concurrency",
            str(self.concurrency),
            "--lease-ms",
            str(self.lease_ms),
            "--stop-timeout-ms",
            str(self.stop_timeout_ms),
            "--poll-ms",
            "100",
            *self.extra,
        ]

    async def start(self, *, timeout_s: float = 60.0) -> None:
        """Start and wait for its "ready" line (role and readiness checked)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
        env["PYTHONPATH"] = str(REPO_ROOT)
        with self.log_path.open("ab") as log, self.out_path.open("ab") as out:
            self.proc = await trio.lowlevel.open_process(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=log,
                cwd=str(REPO_ROOT),
                env=env,
            )
        with trio.fail_after(timeout_s):
            while b"ready" not in self.out_path.read_bytes():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker {self.name} exited at start: {self.log()}")
                await trio.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def send(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def kill(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> int | None:
        """SIGCONT + SIGTERM; SIGKILL if it outlasts its stop timeout by 20 s."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(self.stop_timeout_ms / 1000 + 20):
                await proc.wait()
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        return proc.returncode


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (and is not a zombie we could reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"))


def kill_if_alive(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
