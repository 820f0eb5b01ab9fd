"""The demo's replica processes: a ``Fleet`` of ``qlsched run`` with the plan's flags."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import trio

from qlsched.tools.demo.plan import START_TIMEOUT_S, DemoFailed, Plan
from qlsched.tools.fleet import Fleet, Replica


@dataclass
class DemoReplica(Replica):
    """A replica and what the demo did to it."""

    killed_at_s: float | None = None
    """Seconds into the window when the demo SIGKILLed it (the crash)."""
    stop: str = ""
    """How it ended: 'stopped in order', 'SIGKILL after the stop deadline', ..."""


class DemoFleet(Fleet[DemoReplica]):
    """The replica processes (``qlsched.fleet``), a guardian for them (which also removes the
    work directory should the demo die), and the sync safety net: leaving the ``with``
    SIGKILLs and reaps whatever is still alive."""

    def __init__(self, plan: Plan, workdir: Path) -> None:
        super().__init__(workdir, DemoReplica, guardian_removes_workdir=True)
        self.plan = plan

    def start(self, name: str, runtime_dsn: str) -> DemoReplica:
        plan = self.plan
        flags = [
            "--lease-ms",
            str(plan.lease_ms),
            "--cadence-ms",
            str(plan.cadence_of(len(self.replicas))),
            "--stop-timeout-ms",
            str(plan.stop_timeout_ms),
        ]
        env = {"QLSCHED_IDLE_IN_TRANSACTION_TIMEOUT_MS": str(plan.timeouts.idle_in_transaction_ms)}
        return self.spawn(name, runtime_dsn, flags, env)

    def kill_all(self) -> None:
        for replica in self.replicas:
            if replica.alive():
                replica.signal(signal.SIGKILL)
                replica.stop = replica.stop or "SIGKILL (demo interrupted)"


async def wait_started(replicas: list[DemoReplica]) -> None:
    """Until every replica printed its started line (readiness passed, HTTP bound)."""
    pending = {r.name: r for r in replicas}
    with trio.fail_after(START_TIMEOUT_S):
        while pending:
            for name, replica in list(pending.items()):
                text = replica.log.read_text(errors="replace") if replica.log.exists() else ""
                for line in text.splitlines():
                    if f"replica {name} started" in line:
                        _, _, where = line.partition(" started")
                        replica.http = where.strip() or None
                        del pending[name]
                        break
                else:
                    if not replica.alive():
                        raise DemoFailed(
                            f"{name} exited during start (code {replica.proc.returncode}):\n"
                            + replica.log_tail()
                        )
            await trio.sleep(0.05)
