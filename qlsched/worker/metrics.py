"""Prometheus metrics of one worker, in a registry of its own (several workers can share a
process). Labels are closed codes (``JobCode``), never free text. Every series carries
``profile="cluster"`` as the replicas' do (``qlsched.metrics.ProfileRegistry``): workers
exist only in the cluster, and one dashboard splits or sums both by the same label.

Also kept as plain counts (``statistics()``) for ``qlsched work``'s summary, the bench and
tests, which need no exposition parsing.
"""

from __future__ import annotations

import collections

import msgspec
from prometheus_client import Counter, Histogram
from prometheus_client.exposition import generate_latest

from qlsched.metrics import ProfileRegistry

# A job is a process start at least (milliseconds) and at most a task's timeout (hours).
DURATION_BUCKETS_S = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 1800, 3600)


class WorkerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    claims: int
    outcomes: dict[str, int]
    lost_leases: int
    retries: int
    fence_refused: int
    commit_unknown: int


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = ProfileRegistry("cluster")
        r = self.registry
        self._claims = Counter("qlsched_worker_claims", "Runs claimed by this worker", registry=r)
        self._outcomes = Counter(
            "qlsched_worker_outcomes", "Jobs ended, by code", ["code"], registry=r
        )
        self._durations = Histogram(
            "qlsched_worker_job_seconds",
            "Job duration (claim to end)",
            buckets=DURATION_BUCKETS_S,
            registry=r,
        )
        self._lost = Counter(
            "qlsched_worker_lost_leases",
            "Attempts whose lease expired: marked lost by this worker, or lost while running",
            registry=r,
        )
        self._retries = Counter(
            "qlsched_worker_retries", "Runs queued again for a retry by this worker", registry=r
        )
        self._finish = Counter(
            "qlsched_worker_finish_problems",
            "Finishes refused by the fence or with an unknown commit",
            ["outcome"],
            registry=r,
        )
        self._counts: collections.Counter[str] = collections.Counter()
        self._outcome_counts: collections.Counter[str] = collections.Counter()

    def claimed(self) -> None:
        self._claims.inc()
        self._counts["claims"] += 1

    def finished(self, code: str, seconds: float) -> None:
        self._outcomes.labels(code=code).inc()
        self._durations.observe(seconds)
        self._outcome_counts[code] += 1

    def lost(self, *, retried: bool) -> None:
        self._lost.inc()
        self._counts["lost"] += 1
        if retried:
            self.retried()

    def lease_lost(self) -> None:
        self._lost.inc()
        self._counts["lost"] += 1

    def retried(self) -> None:
        self._retries.inc()
        self._counts["retries"] += 1

    def refused(self) -> None:
        self._finish.labels(outcome="fence_refused").inc()
        self._counts["fence_refused"] += 1

    def unknown(self) -> None:
        self._finish.labels(outcome="commit_unknown").inc()
        self._counts["commit_unknown"] += 1

    def statistics(self) -> WorkerStatistics:
        c = self._counts
        return WorkerStatistics(
            claims=c["claims"],
            outcomes=dict(self._outcome_counts),
            lost_leases=c["lost"],
            retries=c["retries"],
            fence_refused=c["fence_refused"],
            commit_unknown=c["commit_unknown"],
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
