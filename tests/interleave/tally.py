"""The explorer's counts for this pytest session (printed by the package's conftest)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Tally:
    explorations: int = 0
    """Pairs and triples explored (one test each)."""
    orderings: int = 0
    """Orderings run (each one whole, on its own project)."""
    reordered: int = 0
    """Orderings where a step waited for its session's lock, so a later step went first."""
    waits: int = 0
    """Orderings where some step ended waiting on another session's lock."""
    failed: int = 0
    lines: list[str] = dataclasses.field(default_factory=list)


TALLY = Tally()
