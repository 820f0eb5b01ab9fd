"""The passes a round runs after its schedule rows (requests, then Runs), in order: each
profile's composition root lists its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio


class AfterRound(Protocol):
    async def run(self, stop: trio.Event | None) -> object: ...


class Passes:
    """The passes a round runs after its schedule rows, in order."""

    def __init__(self, passes: Sequence[AfterRound]) -> None:
        self._passes = tuple(passes)

    async def run(self, stop: trio.Event | None = None) -> list[object]:
        return [await p.run(stop) for p in self._passes]
