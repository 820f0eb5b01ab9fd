"""The bench's replicas: ``python -m qlsched run`` processes, started, watched and stopped.

Each replica is the product's own command, configured by flags (claim budget, lease,
cadence, stop deadline, ``--http 127.0.0.1:0`` for ``/metrics``, a diagnostics file) and its
runtime DSN in the environment (never argv, which any local user can read). A replica is
ready when it prints its started line (readiness, recovery and the lifecycle passed, HTTP
bound; the line names the address).

Ownership: a ``Fleet`` owns every process it spawns (``qlsched.tools.fleet``): they are tracked by
pid, signalled only while not yet reaped, and SIGKILLed and reaped when the ``with`` block is
left, however it is left. A guardian process SIGKILLs them should the bench itself die
(SIGKILL included), each only while it is still the very process started (same start time in
``/proc``).
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import msgspec
import trio

from qlsched.tools import fleet
from qlsched.tools.bench.machine import proc_kib

START_TIMEOUT_S = 60.0
STOP_SLACK_S = 5.0
"""Beyond a replica's stop deadline, how long to wait for its exit before SIGKILL."""
HTTP_TIMEOUT_S = 5.0
ROUNDS_METRIC = "qlsched_rounds_total"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


class ReplicaSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The ``qlsched run`` flags every bench replica gets."""

    claim_budget: int
    cadence_ms: int
    lease_ms: int
    stop_timeout_ms: int


class Replica(fleet.Replica):
    """A bench replica: also its memory, read from ``/proc``."""

    def rss_kib(self) -> int | None:
        """``VmRSS`` of the process (KiB), None once it is gone."""
        return proc_kib(f"/proc/{self.pid}/status", "VmRSS")

    def peak_kib(self) -> int | None:
        """``VmHWM`` (peak RSS) of the process (KiB), None once it is gone."""
        return proc_kib(f"/proc/{self.pid}/status", "VmHWM")

    def cpu_s(self) -> float | None:
        """User + system CPU seconds the process has used (``/proc/<pid>/stat``), None once
        it is gone."""
        try:
            text = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        # Fields after the command name (which may hold spaces): utime, stime are 14 and 15.
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Fleet:
    """The replica processes of one bench run (``qlsched.tools.fleet.Fleet``, guardian included),
    named ``bench-1``, ``bench-2``, ... over the whole run, each with the bench's flags."""

    def __init__(self, workdir: Path) -> None:
        self._fleet = fleet.Fleet(workdir, Replica)
        self._spawned = 0

    def __enter__(self) -> Fleet:
        self._fleet.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._fleet.__exit__(*exc)

    def spawn(self, runtime_dsn: str, settings: ReplicaSettings) -> Replica:
        """Start one ``qlsched run`` process (not yet ready: see ``wait_started``)."""
        self._spawned += 1
        flags = [
            "--claim-budget",
            str(settings.claim_budget),
            "--lease-ms",
            str(settings.lease_ms),
            "--cadence-ms",
            str(settings.cadence_ms),
            "--stop-timeout-ms",
            str(settings.stop_timeout_ms),
        ]
        return self._fleet.spawn(f"bench-{self._spawned}", runtime_dsn, flags)


async def wait_started(replicas: list[Replica]) -> None:
    """Until every replica printed its started line (``fleet.wait_started``).

    Raises:
        ReplicaFailed: one exited first, or they were not all ready in ``START_TIMEOUT_S``.
    """
    await fleet.wait_started(replicas, START_TIMEOUT_S)


WARM_ROUNDS = 3
"""Rounds every replica ends before a measurement starts (``wait_warm``)."""
WARM_TIMEOUT_S = 20.0
QUIET_CPU_PER_REPLICA = 0.05
"""A warm replica idles below this share of one CPU (its start-up work is done)."""
QUIET_WINDOW_S = 0.25


async def wait_warm(replicas: list[Replica], rounds: int = WARM_ROUNDS) -> bool:
    """Until every replica has ended ``rounds`` rounds and together they idle (CPU below
    ``QUIET_CPU_PER_REPLICA`` each over ``QUIET_WINDOW_S``), at most ``WARM_TIMEOUT_S``.

    Why: measured in a sweep, the start-up of 8 replica processes on two CPUs went on for
    about a second past their started lines and into the drain the bench timed, a cost the
    smaller counts did not pay. Returns whether they were warm before the timeout."""
    with trio.move_on_after(WARM_TIMEOUT_S):
        for r in replicas:
            while (await metrics(r)).get(ROUNDS_METRIC, 0) < rounds:
                fleet.check_alive([r])
                await trio.sleep(0.05)
        limit = QUIET_CPU_PER_REPLICA * len(replicas) * QUIET_WINDOW_S
        while True:
            before = sum(r.cpu_s() or 0.0 for r in replicas)
            await trio.sleep(QUIET_WINDOW_S)
            if sum(r.cpu_s() or 0.0 for r in replicas) - before <= limit:
                return True
    return False


async def stop(replicas: list[Replica], settings: ReplicaSettings) -> list[str]:
    """SIGTERM each replica, wait up to its stop deadline plus slack, SIGKILL those still
    alive. Returns the problems (empty when every one stopped in order with exit 0)."""
    return await fleet.stop_in_order(replicas, settings.stop_timeout_ms / 1000 + STOP_SLACK_S)


async def metrics(replica: Replica) -> dict[str, float]:
    """The replica's ``/metrics`` samples by name (``name -> value``), each summed over its
    label sets: every qlsched series is labelled (``profile="cluster"`` at least), and one
    replica serves one profile, so a family without other labels reads as its one value."""
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
