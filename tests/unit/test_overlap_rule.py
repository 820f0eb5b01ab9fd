"""The overlap policy's rule (``core.overlap``), as both profiles apply it: a cron
occurrence, and a request's chunk filling the free places in order."""

from __future__ import annotations

import pytest

from qlsched.core.overlap import chunk_decisions, cron_decision


@pytest.mark.parametrize(
    ("policy", "active", "held", "expected"),
    [
        ("allow", 3, 1, "queue"),
        ("cancel_other", 2, 0, "queue"),
        ("skip", 0, 0, "queue"),
        ("skip", 1, 0, "skip"),
        ("skip", 0, 1, "skip"),
        ("buffer_one", 0, 0, "queue"),
        ("buffer_one", 1, 0, "hold"),
        ("buffer_one", 1, 1, "skip"),
        ("buffer_one", 0, 1, "skip"),
    ],
)
def test_a_cron_occurrence(policy: str, active: int, held: int, expected: str) -> None:
    assert cron_decision(policy, active, held) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "active", "held", "expected"),
    [
        ("allow", 1, 1, ["queue"] * 3),
        ("cancel_other", 1, 0, ["queue"] * 3),
        ("skip", 0, 0, ["queue", "skip", "skip"]),
        ("skip", 1, 0, ["skip"] * 3),
        ("buffer_one", 0, 0, ["queue", "hold", "skip"]),
        ("buffer_one", 1, 0, ["hold", "skip", "skip"]),
        ("buffer_one", 0, 1, ["skip"] * 3),
    ],
)
def test_a_chunk_fills_the_free_places_in_order(
    policy: str, active: int, held: int, expected: list[str]
) -> None:
    assert chunk_decisions(policy, active, held, 3) == expected  # type: ignore[arg-type]
    assert chunk_decisions(policy, active, held, 0) == []  # type: ignore[arg-type]
