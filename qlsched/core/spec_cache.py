"""Parsed crons and decision specs, built once per distinct definition and kept in an LRU.

Parsing a cron expression costs far more than deciding with it, and a replica sees the same
few definitions every round; the cluster, the Edge scheduler and the request pass share this
one cache shape so they agree on what a definition's identity is.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar
from zoneinfo import ZoneInfoNotFoundError

import msgspec

from qlsched.core.cron import CronError, CronSchedule, parse_cron
from qlsched.core.decide import MISFIRE_GRACE_MS_MAX, MisfirePolicy, TriggerSpec
from qlsched.core.fence import Claim

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_POLICIES: Final[dict[str, MisfirePolicy]] = {"skip": "skip", "fire_once": "fire_once"}


class InvalidSpec(msgspec.Struct, frozen=True):
    """A revision whose cron, zone or misfire settings cannot be used (cached like a spec).

    Publish validates them all, so this is a corrupt revision: the caller fails closed."""

    exception: str | None
    """The parse error's type name; None when the misfire policy or grace is out of range."""


class Lru(Generic[K, V]):
    """A bounded map that builds a missing value on first use and drops the least recent."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._size = max(1, size)

    def get(self, key: K, build: Callable[[], V]) -> V:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        built = build()
        self._items[key] = built
        if len(self._items) > self._size:
            self._items.popitem(last=False)
        return built

    def __len__(self) -> int:
        return len(self._items)


def build_cron(cron: str, timezone: str, dst_gap: str, dst_fold: str) -> CronSchedule | InvalidSpec:
    """The parsed schedule, or why it cannot be used. Any exception but a parse or zone
    error is a bug and propagates."""
    try:
        return parse_cron(cron, timezone, dst_gap=dst_gap, dst_fold=dst_fold)
    except (CronError, ZoneInfoNotFoundError) as exc:
        return InvalidSpec(exception=type(exc).__name__)


def build_spec(claim: Claim) -> TriggerSpec | InvalidSpec:
    """The decision spec of ``claim``'s revision, from the fields ``Claim.spec_key`` names."""
    policy = _POLICIES.get(claim.misfire_policy)
    if policy is None or not 0 <= claim.misfire_grace_ms <= MISFIRE_GRACE_MS_MAX:
        return InvalidSpec(exception=None)
    cron = build_cron(claim.cron, claim.timezone, claim.dst_gap, claim.dst_fold)
    if isinstance(cron, InvalidSpec):
        return cron
    return TriggerSpec(cron=cron, misfire_policy=policy, misfire_grace_ms=claim.misfire_grace_ms)


class SpecCache:
    """Decision specs by ``Claim.spec_key``: one parse per distinct definition."""

    def __init__(self, size: int) -> None:
        self._lru: Lru[tuple[object, ...], TriggerSpec | InvalidSpec] = Lru(size)

    def get(self, claim: Claim) -> TriggerSpec | InvalidSpec:
        return self._lru.get(claim.spec_key, lambda: build_spec(claim))
