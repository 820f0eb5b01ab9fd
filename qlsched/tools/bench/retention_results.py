"""The retention phase's figures (``qlsched.tools.bench.retention``), in the bench report."""

from __future__ import annotations

import msgspec


class PruneTiming(msgspec.Struct, frozen=True, kw_only=True):
    history: int
    """Finished Runs past the horizon when the batches began."""
    load_s: float
    batches: int
    p50_ms: float
    max_ms: float
    exact: bool
    """Every batch deleted exactly its Runs, one Attempt and two events each; the queued
    Runs all remain."""


class RetentionCost(msgspec.Struct, frozen=True, kw_only=True):
    batch_runs: int
    floor: PruneTiming
    large: PruneTiming
    ratio: float | None
    """large.p50_ms / floor.p50_ms."""
