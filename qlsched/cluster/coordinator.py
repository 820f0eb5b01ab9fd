"""The cluster's round: the shared engine (``qlsched.engine.round``) with leases.

A ``Coordinator`` is a ``RoundEngine`` built from a replica's ``Config``: its owner, claim
budget, catch-up budget, lease and lookahead, each validated when the Config was built. Claims are
settled one by one and the round's Fires admitted in one batch while the lease holds.
"""

from __future__ import annotations

from qlsched.core.config import Config
from qlsched.core.diagnostics import DiagnosticSink
from qlsched.core.store import ScheduleStore
from qlsched.engine.round import SPEC_CACHE_SIZE, RequestPass, RoundEngine
from qlsched.engine.stats import RoundStats
from qlsched.metrics import Metrics

__all__ = ["Coordinator", "RoundStats"]


class Coordinator(RoundEngine[Metrics]):
    """Runs bounded rounds against one store for one replica (``config.owner``)."""

    def __init__(
        self,
        store: ScheduleStore,
        config: Config,
        sink: DiagnosticSink,
        metrics: Metrics,
        *,
        spec_cache_size: int = SPEC_CACHE_SIZE,
        requests: RequestPass | None = None,
    ) -> None:
        super().__init__(
            store,
            owner=config.owner,
            budget=config.claim_budget,
            max_budget=config.catch_up_budget,
            lease_ms=config.lease_ms,
            lookahead_ms=config.lookahead_ms,
            sink=sink,
            metrics=metrics,
            spec_cache_size=spec_cache_size,
            requests=requests,
        )
