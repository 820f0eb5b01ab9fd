"""The lease arithmetic, in one place: every time budget derived from ``lease_ms``.

A claim (a schedule row's or a request's) is held for ``lease_ms`` by the database's clock.
This process reckons the same span by its own monotonic clock from just after the claim
statement returned, and keeps margins inside it so that no write is sent that the
database's fence would refuse on expiry. The margins and the formulas live here so a change
to one is seen beside the others (they were five formulas with three margins across four
modules). Pure arithmetic: seconds in, seconds out; the caller passes its clock's time.
"""

from __future__ import annotations

import math
from typing import Final

RETRY_MARGIN_S: Final = 0.5
"""A write is retried only while more than this is left of its claim's lease."""
ADMIT_MARGIN_S: Final = 1.0
"""A round whose claims are older than the lease less this does not send its admit: every
fence would fail on expiry (measured from before the claim statement)."""
CALL_MARGIN_S: Final = 1.0
"""A database call's client-side budget ends this long before the lease would."""
REQUEST_POLL_CADENCES: Final = 5
"""While no request is known to be pending, requests are looked for every this many
cadences (at most half a lease apart)."""


def retry_deadline_s(claimed_s: float, lease_ms: int) -> float:
    """The last moment (on the caller's clock) a write of a claim taken at ``claimed_s`` may
    be retried: the lease less ``RETRY_MARGIN_S``."""
    return claimed_s + lease_ms / 1000 - RETRY_MARGIN_S


def round_outlived_lease(elapsed_s: float, lease_ms: int) -> bool:
    """True when a round ``elapsed_s`` old (since before its claim) must not admit."""
    return elapsed_s > lease_ms / 1000 - ADMIT_MARGIN_S


def call_timeout_s(lease_ms: int, cadence_ms: int) -> float:
    """The client-side budget of one database call: a cadence and a margin under the lease
    (so usually above the runtime role's statement and lock timeouts, which come first as
    typed errors), never under half a lease. A server that stops answering is then noticed
    within one lease, even when it went silent between rounds."""
    lease_s, cadence_s = lease_ms / 1000, cadence_ms / 1000
    return max(lease_s / 2, lease_s - cadence_s - CALL_MARGIN_S)


def request_poll_interval_s(cadence_ms: int, lease_ms: int) -> float:
    """Seconds between two looks for requests while none is known to be pending."""
    cadence_s, lease_s = cadence_ms / 1000, lease_ms / 1000
    return max(cadence_s, min(REQUEST_POLL_CADENCES * cadence_s, lease_s / 2))


class PollTimer:
    """When a pass after the round (requests, runs) looks next: every ``interval_s``
    (default: ``request_poll_interval_s``), or at once after ``again`` (work was left). The
    caller passes its clock's time."""

    def __init__(self, cadence_ms: int, lease_ms: int, interval_s: float | None = None) -> None:
        self.interval_s = (
            request_poll_interval_s(cadence_ms, lease_ms) if interval_s is None else interval_s
        )
        self._next = -math.inf

    def due(self, now: float) -> bool:
        return now >= self._next

    def looked(self, now: float) -> None:
        """A look was taken at ``now``: the next is ``interval_s`` later."""
        self._next = now + self.interval_s

    def again(self) -> None:
        """The next round looks, whatever the interval."""
        self._next = -math.inf
