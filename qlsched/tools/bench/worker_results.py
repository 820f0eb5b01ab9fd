"""The worker phase's figures (``qlsched.tools.bench.worker``), in the bench report."""

from __future__ import annotations

import msgspec


class WorkerRate(msgspec.Struct, frozen=True, kw_only=True):
    concurrency: int
    jobs: int
    succeeded: int
    seconds: float
    jobs_per_s: float


class WorkerThroughput(msgspec.Struct, frozen=True, kw_only=True):
    floor: WorkerRate
    """Concurrency 1."""
    concurrent: WorkerRate
    ratio: float
    """concurrent / floor jobs per second."""
