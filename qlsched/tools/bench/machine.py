"""The machine a bench ran on: CPUs, memory, and the load while it ran, read from ``/proc``
(as are the bench processes' own memory figures, ``proc_kib``).

Figures from a shared or busy machine are noisy; the report carries the load averages at
the start and the end of the run, and how the CPUs were used meanwhile (``/proc/stat``),
steal included: on a virtual machine, time the hypervisor gave to other guests.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import msgspec


class Machine(msgspec.Struct, frozen=True, kw_only=True):
    cpu_count: int
    cpu_model: str
    memory_mb: int | None
    system: str
    python: str


class Load(msgspec.Struct, frozen=True):
    """The 1, 5 and 15 minute load averages."""

    one: float
    five: float
    fifteen: float


class CpuTimes(msgspec.Struct, frozen=True):
    """Cumulative CPU time of all CPUs (clock ticks): everything, idle (with I/O wait),
    stolen."""

    total: int
    idle: int
    steal: int


class CpuUse(msgspec.Struct, frozen=True):
    """Shares of all CPUs' time between two ``CpuTimes`` readings, percent."""

    busy_pct: float
    steal_pct: float


def cpu_times() -> CpuTimes | None:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu" or len(first) < 9:
        return None
    ticks = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    return CpuTimes(total=sum(ticks), idle=ticks[3] + ticks[4], steal=ticks[7])


def cpu_use(start: CpuTimes | None, end: CpuTimes | None) -> CpuUse | None:
    if start is None or end is None or end.total <= start.total:
        return None
    total = end.total - start.total
    idle = end.idle - start.idle
    steal = end.steal - start.steal
    return CpuUse(
        busy_pct=round(100 * (total - idle - steal) / total, 1),
        steal_pct=round(100 * steal / total, 1),
    )


def machine() -> Machine:
    return Machine(
        cpu_count=os.cpu_count() or 0,
        cpu_model=_cpu_model(),
        memory_mb=_memory_mb(),
        system=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
    )


def load() -> Load:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return Load(-1.0, -1.0, -1.0)
    return Load(round(one, 2), round(five, 2), round(fifteen, 2))


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor() or "unknown"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or "unknown"


def _memory_mb() -> int | None:
    kib = proc_kib("/proc/meminfo", "MemTotal")
    return None if kib is None else kib // 1024


def proc_kib(path: str, field: str) -> int | None:
    """The ``field:  N kB`` line of a ``/proc`` file (``/proc/meminfo``,
    ``/proc/<pid>/status``), in KiB; None when the file or the line is missing (a process
    that is gone)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None
