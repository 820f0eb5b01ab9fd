"""The replica's pruner (docs/contract.md §14): finished Runs past the retention are
deleted beside the rounds, by every replica, with no leader.

A task of its own, not a step of the round: a round's budget is the lease, and a prune
has no lease to keep (each batch is one autocommitted statement whose Runs are locked with
``SKIP LOCKED``, so replicas pruning at once take disjoint batches and never wait on one
another). Every ``PASS_EVERY_CADENCES`` cadences a pass runs batches of ``BATCH_RUNS``
until one is not full or ``PASS_BATCHES`` ran; a pass that stopped at that bound is
followed by the next one a cadence later, so a long history drains without starving the
pool the rounds claim from. Retention off costs one cheap statement per pass.

Errors never end the replica: a failed batch is a diagnostic (``retention_failed``) and
counted (``qlsched_retention_failures_total``), and the next pass tries again. Every
deleted row is counted in this replica's metrics (``qlsched_retention_pruned_*_total``)
and database-wide in ``retention_pruned`` (``qlsched status``).

Ownership: the composition root starts ``run`` in its nursery and calls ``stop`` first
thing at stop; a batch in flight is cut (the server rolls its statement back).
"""

from __future__ import annotations

import time
from typing import Final

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram

from qlsched.core.diagnostics import DiagnosticSink, from_exception
from qlsched.core.retention import PruneBatch
from qlsched.postgres.pool import Database
from qlsched.postgres.retention import BATCH_RUNS, prune_batch

PASS_EVERY_CADENCES: Final = 10
"""Cadences between two passes (clamped to ``PASS_MIN_S``..``PASS_MAX_S``)."""
PASS_MIN_S: Final = 1.0
PASS_MAX_S: Final = 60.0
PASS_BATCHES: Final = 20
FAILED_BACKOFF_MAX_S: Final = 30.0
"""After failed batches the next pass waits twice as long each time, up to this (the
lifecycle's own back-off cap): a database outage is not knocked on every interval."""
"""Batches in one pass at most (10,000 Runs at the default batch size)."""
RETENTION_FAILED: Final = "retention_failed"
BATCH_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class RetentionMetrics:
    """This replica's prune counters, in the replica's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def pruned(what: str, text: str) -> Counter:
            return Counter(f"qlsched_retention_pruned_{what}", text, registry=registry)

        self.runs: Final = pruned("runs", "Finished Runs this replica deleted past the retention.")
        self.attempts: Final = pruned("attempts", "Attempts deleted with those Runs.")
        self.events: Final = pruned("events", "Run events deleted with those Runs.")
        self.marks: Final = pruned("marks", "Recovery marks deleted with those Runs.")
        self.batches: Final = Counter(
            "qlsched_retention_batches",
            "Prune batches this replica sent (empty ones included).",
            registry=registry,
        )
        self.failures: Final = Counter(
            "qlsched_retention_failures", "Prune batches that failed.", registry=registry
        )
        self.batch_seconds: Final = Histogram(
            "qlsched_retention_batch_seconds",
            "Wall time of one prune batch (its statement, round trip included).",
            buckets=BATCH_BUCKETS_S,
            registry=registry,
        )

    def observe(self, batch: PruneBatch, seconds: float) -> None:
        self.batches.inc()
        self.batch_seconds.observe(seconds)
        self.runs.inc(batch.pruned.runs)
        self.attempts.inc(batch.pruned.attempts)
        self.events.inc(batch.pruned.events)
        self.marks.inc(batch.pruned.marks)


def pass_interval_s(cadence_ms: int) -> float:
    """Seconds between two passes for a replica of this cadence."""
    return min(max(PASS_EVERY_CADENCES * cadence_ms / 1000, PASS_MIN_S), PASS_MAX_S)


def next_pass_delay_s(interval_s: float, cadence_s: float, *, more: bool, failures: int) -> float:
    """The wait before the next pass: a cadence while Runs past the horizon are left, the
    interval otherwise, and after ``failures`` failed batches in a row the interval doubled
    as many times, up to ``FAILED_BACKOFF_MAX_S``."""
    if failures:
        doubled = interval_s * (1 << min(failures, 6))
        return min(doubled, max(FAILED_BACKOFF_MAX_S, interval_s))
    return cadence_s if more else interval_s


class Pruner:
    """Prunes on a timer until stopped (one ``run`` per instance)."""

    def __init__(
        self,
        db: Database,
        *,
        owner: str,
        cadence_ms: int,
        sink: DiagnosticSink,
        metrics: RetentionMetrics,
        batch: int = BATCH_RUNS,
    ) -> None:
        self._db = db
        self._owner = owner
        self._cadence_s = cadence_ms / 1000
        self._interval_s = pass_interval_s(cadence_ms)
        self._sink = sink
        self.metrics = metrics
        self._batch = batch
        self._scope = trio.CancelScope()
        self._failures = 0
        """Batches failed in a row: each doubles the wait before the next pass (capped),
        so an outage costs a few connection attempts, not one per interval."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pass after pass until ``stop``; the first pass starts one interval after start,
        once the rounds are under way."""
        task_status.started()
        with self._scope:
            delay = self._interval_s
            while True:
                await trio.sleep(delay)
                more = await self.prune_pass()
                delay = next_pass_delay_s(
                    self._interval_s, self._cadence_s, more=more, failures=self._failures
                )

    def stop(self) -> None:
        """End ``run`` now (idempotent; a batch in flight is cut and rolled back)."""
        self._scope.cancel()

    async def prune_pass(self) -> bool:
        """Up to ``PASS_BATCHES`` batches while each is full; True when the last one was
        full (more Runs are past the horizon)."""
        for _ in range(PASS_BATCHES):
            batch = await self._one_batch()
            if batch is None or not batch.full:
                return False
        return True

    async def _one_batch(self) -> PruneBatch | None:
        started = time.perf_counter()
        try:
            batch = await prune_batch(self._db, limit=self._batch)
        except Exception as exc:
            self._failures += 1
            self.metrics.failures.inc()
            self._sink.emit(from_exception(RETENTION_FAILED, exc, replica=self._owner))
            return None
        self._failures = 0
        self.metrics.observe(batch, time.perf_counter() - started)
        return batch
