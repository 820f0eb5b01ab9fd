"""The demo's replica processes: a ``Fleet`` of ``qlsched run`` with the plan's flags."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from qlsched.tools.demo.plan import Plan
from qlsched.tools.fleet import Fleet, Replica


@dataclass
class DemoReplica(Replica):
    """A replica and what the demo did to it."""

    killed_at_s: float | None = None
    """Seconds into the window when the demo SIGKILLed it (the crash)."""


class DemoFleet(Fleet[DemoReplica]):
    """The replica processes (``qlsched.tools.fleet``), a guardian for them (which also removes the
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
                replica.ended = replica.ended or "SIGKILL (demo interrupted)"
