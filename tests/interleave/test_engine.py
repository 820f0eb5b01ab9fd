"""The explorer's enumeration: every interleaving, each once, each keeping every session's
own order (pure; no database)."""

from __future__ import annotations

import itertools

import pytest

from tests.interleave.engine import count_orderings, orderings


@pytest.mark.parametrize("sizes", [(4, 2), (3, 1), (4, 4), (3, 2, 3), (1, 1, 1)])
def test_orderings_are_every_interleaving_once(sizes: tuple[int, ...]) -> None:
    """``orderings`` yields exactly the distinct arrangements of the sessions' steps
    (the multinomial count), none twice."""
    got = list(orderings(sizes))
    steps = [i for i, n in enumerate(sizes) for _ in range(n)]
    want = set(itertools.permutations(steps))
    assert len(got) == len(set(got)) == count_orderings(sizes)
    assert set(got) == want
