"""What a coordinator round did: counted while it runs, frozen when it ends.

One list of fields serves both: ``RoundCounts`` is the mutable tally a round's tasks add to
(Trio is cooperative, so one task at a time touches it), ``RoundStats`` the same fields
frozen with the round's budget and duration. Its own module, so the coordinator (writer)
and the metrics (reader) both depend on it instead of on each other.
"""

from __future__ import annotations

import msgspec


class RoundCounts(msgspec.Struct, kw_only=True):
    """Counts of store outcomes are rows; ``*_occurrences`` are cron occurrences."""

    claimed: int = 0
    fired: int = 0
    """Fire decisions (Run/Attempt ids minted), admitted or not."""
    admitted: int = 0
    already_admitted: int = 0
    """Fires whose key another path had already admitted: the cursor moved, no Run."""
    overlap_skipped: int = 0
    """Fires the trigger's overlap policy skipped: the cursor moved, no Run."""
    held: int = 0
    """Fires admitted held (overlap ``buffer_one``), also in ``admitted``."""
    initialized: int = 0
    skipped: int = 0
    released: int = 0
    not_due: int = 0
    released_on_stop: int = 0
    """Claims released undecided because the lifecycle was stopping (also in ``released``
    when the release succeeded)."""
    fence_lost: dict[str, int] = msgspec.field(default_factory=dict)
    revision_changed: int = 0
    digest_invalid: int = 0
    inactive: int = 0
    commit_unknown: int = 0
    retry_exhausted: int = 0
    store_failed: int = 0
    errors: dict[str, int] = msgspec.field(default_factory=dict)
    """Diagnostic code -> count, for failures that are not store outcomes."""
    coalesced: int = 0
    skipped_occurrences: int = 0
    stopping: bool = False
    """The lifecycle was stopping by the time the claim statement returned."""
    decided_ahead: int = 0
    """Fires decided before their due time (claimed ahead) and held, also in ``fired``."""
    held_ahead: int = 0
    """Fires held ahead when the round ended (``engine.ahead``), all rounds' together."""
    held_due_at: float | None = None
    """Trio time the first held Fire is to be sent (None: none held): the lifecycle starts
    the next round then, to admit it. A time, not a gap from the round's start: the
    lifecycle's round starts a little before the engine's, and a gap measured from the
    engine's start, slept from the lifecycle's, woke a round too early to take it."""
    next_due_stale: bool = False
    """The store reads the next due time with its claim, and this round moved cursors after
    that read: a moved cursor may be the next due, so the read is stale."""
    next_due_in_ms: int | None = None
    """From the round's claim to the next unclaimed row's due time, by the database's clock,
    when the store reads it with the claim (None: unknown, or nothing waiting)."""

    def count_error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


# msgspec freezes a subclass of a mutable Struct as asked; mypy's dataclass model refuses it.
class RoundStats(RoundCounts, frozen=True, kw_only=True):  # type: ignore[misc]
    """One finished round; ``budget_exhausted`` is ``claimed >= budget``."""

    budget: int
    duration_ms: float = 0.0
    budget_exhausted: bool = False

    @classmethod
    def freeze(cls, counts: RoundCounts, budget: int, duration_ms: float) -> RoundStats:
        fields = msgspec.structs.asdict(counts)
        fields["fence_lost"] = dict(counts.fence_lost)
        fields["errors"] = dict(counts.errors)
        return cls(
            **fields,
            budget=budget,
            duration_ms=duration_ms,
            budget_exhausted=counts.claimed >= budget,
        )

    @property
    def written(self) -> int:
        """Cursors the round moved (admitted, initialized or skipped): the Edge runs the
        next round at once while a full round still moves some."""
        return self.admitted + self.overlap_skipped + self.initialized + self.skipped

    @property
    def races_lost(self) -> int:
        return sum(self.fence_lost.values())
