"""Shared pieces of the lifecycle tests: a MockClock-driven memory store and a replica."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import trio

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.lifecycle import Lifecycle
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.fence import Claim
from tests.support.memory_sink import MemorySink
from tests.support.memory_store import Hook, MemoryStore

BASE_MS = 1_767_225_630_000
"""2026-01-01T00:00:30Z: the store's time at Trio time 0, half a minute past a cron tick."""

MINUTE_MS = 60_000


def mock_now_ms() -> int:
    """The memory store's clock: Trio's (a MockClock in these tests), offset to BASE_MS."""
    return BASE_MS + round(trio.current_time() * 1000)


def make_config(**overrides: Any) -> Config:
    values: dict[str, Any] = {
        "owner": "r1",
        "claim_budget": 16,
        "lease_ms": 30_000,
        "cadence_ms": 1_000,
        "stop_timeout_ms": 2_000,
    }
    values.update(overrides)
    return Config(**values)


@dataclasses.dataclass
class Replica:
    """One replica's parts over a shared memory store."""

    store: MemoryStore
    config: Config
    sink: MemorySink
    metrics: Metrics
    coordinator: Coordinator
    lifecycle: Lifecycle

    def codes(self) -> list[str]:
        return [d.code for d in self.sink.items]


def make_replica(store: MemoryStore | None = None, **config: Any) -> Replica:
    store = store if store is not None else MemoryStore(mock_now_ms)
    cfg = make_config(**config)
    sink = MemorySink(replica=cfg.owner)
    metrics = Metrics()
    coordinator = Coordinator(store, cfg, sink, metrics)
    return Replica(store, cfg, sink, metrics, coordinator, Lifecycle(coordinator, cfg))


def on(method: str, action: Hook) -> Hook:
    """A store hook that runs ``action`` on calls of one port method only."""

    async def hook(called: str) -> None:
        if called == method:
            await action(called)

    return hook


class AheadStore(MemoryStore):
    """Returns claims of the named triggers as if taken ``early_ms`` before their cursor:
    NotDue by default (further ahead than any lookahead); within the replica's lookahead,
    a claim taken ahead."""

    def __init__(
        self, *, ahead: set[str], hook: Hook | None = None, early_ms: int = 3_600_000
    ) -> None:
        super().__init__(mock_now_ms, hook=hook)
        self._ahead = ahead
        self._early_ms = early_ms

    async def claim(self, owner: str, limit: int, lease_ms: int) -> list[Claim]:
        claims = await super().claim(owner, limit, lease_ms)
        return [
            msgspec.structs.replace(c, claimed_at_ms=c.cursor_ms - self._early_ms)
            if (c.trigger_id in self._ahead or "*" in self._ahead) and c.cursor_ms is not None
            else c
            for c in claims
        ]
