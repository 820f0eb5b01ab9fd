"""Fires decided ahead: claims of rows not yet due, held until they fall due.

With a lookahead (``Config.lookahead_ms``), the cluster's claim also takes rows due a little
after the claim's database time. Such a row is decided as of its due time (the decision a
claim taken at that instant gets: on time, nothing passed over), and its Fire is held here
until then, by Trio's clock, for the gap the database measured. The admit checks the due
time again by the database's clock, so a wait that ends a little early never admits early
(the store sends the row again when it is due). At the due time only the admit is left.

Held Fires count against the catch-up budget: a replica holds at most that many, so the
replicas share a tick instead of the first awake taking all of it ahead.

A Fire whose admit waited past the lock timeout (another session held its row: an admit
or a session stalled in a transaction, which the role's idle timeout ends) is held again
and sent once more ``LOCK_RETRY_S`` later, while its lease has room, instead of leaving
its claim to expire: the row moves on once the lock goes, not a lease later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec
import trio

from qlsched.core.fence import Claim, FireRequest
from qlsched.core.outcomes import Outcome, lock_waited

__all__ = ["AheadFires", "HeldFire", "due_ms"]

LOCK_RETRY_S: Final = 0.1
"""A Fire whose admit waited out the lock timeout is sent again this long after (the wait
itself already lasted the timeout: no longer back-off is needed to avoid a busy loop)."""


def due_ms(claim: Claim) -> int | None:
    """When the claimed row's occurrence falls due (its cursor plus its jitter); None for a
    row without a cursor (it is initialized, never fired)."""
    if claim.cursor_ms is None:
        return None
    return claim.cursor_ms + claim.jitter_offset_ms(claim.cursor_ms)


class HeldFire(msgspec.Struct, frozen=True):
    """A Fire waiting for its due time, with the Trio times the admit's lease check needs."""

    fire: FireRequest
    due_ms: int
    """Its due time by the database clock."""
    due_at: float
    """Trio time to send it: its claim's reply plus the gap the database measured."""
    claimed_at: float
    """Trio time its claim statement returned (its lease runs from about then)."""


class AheadFires:
    """The Fires one replica decided ahead and has not admitted yet. Ownership: the round
    engine's, touched by one task at a time (its rounds run in sequence)."""

    def __init__(self) -> None:
        self._held: list[HeldFire] = []

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, fire: FireRequest, due: int, wait_ms: int, replied: float) -> None:
        """Hold ``fire``, due at ``due`` (database ms), ``wait_ms`` after its claim's
        database time, until that long after ``replied`` by Trio's clock.

        No slack is added: the claim read the database clock before its reply left, so when
        Trio's clock reads ``replied`` the database's already reads at least the claim's
        time, and ``wait_ms`` later at least ``due``; the admit reads the clock later
        still, after its own trip to the server. A 1 ms slack made every held Fire 1 ms
        later, and a clock stepped back is still caught by the admit (sent again)."""
        at = replied + wait_ms / 1000
        self._held.append(HeldFire(fire, due, at, replied))

    def hold_locked(
        self, fires: Sequence[FireRequest], outcomes: Sequence[Outcome], claimed_at: float
    ) -> int:
        """Hold again, ``LOCK_RETRY_S`` from now, the Fires whose outcome was a lock wait
        (claimed at ``claimed_at``, Trio time: their lease check runs from there); returns
        how many."""
        at = trio.current_time() + LOCK_RETRY_S
        again = [
            HeldFire(f, f.due_ms, at, claimed_at)
            for f, o in zip(fires, outcomes, strict=False)
            if lock_waited(o)
        ]
        self._held.extend(again)
        return len(again)

    def hold_later(self, held: Sequence[HeldFire]) -> None:
        """Hold ``held`` again, ``LOCK_RETRY_S`` from now (a batch before them waited out
        the lock timeout: the lock is likely still there)."""
        at = trio.current_time() + LOCK_RETRY_S
        self._held.extend(msgspec.structs.replace(h, due_at=at) for h in held)

    def take_due(self, now: float) -> list[HeldFire]:
        """The held Fires due by ``now`` (Trio time), no longer held, with every Fire due no
        later by the database clock: Fires of one due time, held from claims that returned
        at slightly different times, are admitted together, not a few ms apart."""
        due = max((h.due_ms for h in self._held if h.due_at <= now), default=None)
        if due is None:
            return []
        taken = [h for h in self._held if h.due_ms <= due]
        self._held = [h for h in self._held if h.due_ms > due]
        return taken

    def take_all(self) -> list[HeldFire]:
        """Every held Fire, no longer held (the replica is stopping: they are released)."""
        held, self._held = self._held, []
        return held

    def next_due(self) -> float | None:
        """Trio time the first held Fire falls due; None when none is held."""
        return min((h.due_at for h in self._held), default=None)
