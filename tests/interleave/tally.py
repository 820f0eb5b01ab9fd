"""The explorer's counts for this pytest session (printed by the suite's conftest; with
pytest-xdist each worker sends its counts to the controller, which adds them up)."""

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

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def add(self, other: dict[str, object]) -> None:
        """Add a worker's counts (``as_dict`` of its tally) to these."""
        for field in ("explorations", "orderings", "reordered", "waits", "failed"):
            value = other.get(field, 0)
            assert isinstance(value, int)
            setattr(self, field, getattr(self, field) + value)
        lines = other.get("lines", [])
        assert isinstance(lines, list)
        self.lines += [str(line) for line in lines]


TALLY = Tally()
