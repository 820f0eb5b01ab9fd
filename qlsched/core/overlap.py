"""The overlap policy's rule (docs/contract.md §13), decided from a trigger's unfinished Runs.

Pure: the Edge's round and requests call it inside their transaction with the counts they
read there; the cluster's admits carry the same rule in SQL (``postgres/sql/admit.sql`` and
``requests.sql``), and the conformance tests hold the two profiles to one behaviour.
"""

from __future__ import annotations

from typing import Literal

from qlsched.core.specs import Overlap

Decision = Literal["queue", "hold", "skip"]
"""A queued Run, a Run held back (``buffer_one``), or no Run (counted as overlap-skipped)."""


def reads_runs(policy: Overlap) -> bool:
    """Whether the policy needs the trigger's unfinished Runs: ``allow`` (the default) and
    ``cancel_other`` admit whatever runs, so they cost no read."""
    return policy in ("skip", "buffer_one")


def cron_decision(policy: Overlap, active: int, held: int) -> Decision:
    """One cron occurrence, with ``active`` Runs of its trigger queued or running and
    ``held`` held back."""
    if not reads_runs(policy) or active + held == 0:
        return "queue"
    if policy == "buffer_one" and held == 0:
        return "hold"
    return "skip"


def chunk_decisions(policy: Overlap, active: int, held: int, n: int) -> list[Decision]:
    """A request's ``n`` occurrences in order: they fill the free places the policy leaves
    (``skip``: one Run, only when none is unfinished; ``buffer_one``: one queued and one
    held), the rest are skipped."""
    if not reads_runs(policy):
        return ["queue"] * n
    places: list[Decision]
    if policy == "skip":
        places = ["queue"] if active + held == 0 else []
    elif held > 0:
        places = []
    elif active > 0:
        places = ["hold"]
    else:
        places = ["queue", "hold"]
    return [places[i] if i < len(places) else "skip" for i in range(n)]
