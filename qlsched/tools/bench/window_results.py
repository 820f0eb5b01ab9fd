"""What a steady window came to, the figures the steady phases (``steady``, ``on_time`` and
the 100,000-trigger steady) each report first: a plain struct both ``results`` and
``scale_results`` extend, so each phase's result keeps its flat JSON keys."""

from __future__ import annotations

import msgspec


class WindowCounts(msgspec.Struct, frozen=True, kw_only=True):
    """``triggers`` over ``seconds``: the occurrences due in the window, the Runs admitted
    for them, and what the exactly-once audit found."""

    triggers: int
    seconds: int
    expected_occurrences: int
    """Occurrences due in the measured window."""
    occurrences: int
    """Runs admitted for them."""
    duplicates: int
    lost: int
    """Occurrences with no Run: the audit's, or the window's shortfall if that is more."""
    malformed: int
    """Runs not in their admission shape, or at no expected occurrence (verify)."""
