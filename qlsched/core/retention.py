"""Retention (docs/contract.md §14): how long finished Runs are kept, as values.

The admin gives a human duration (``30d``, ``12h``, ``90m``, ``1d12h``; ``off`` or
``none`` to keep everything); the database stores milliseconds and decides the horizon by
its own clock. Parsing and showing live here, beside the bounds the migration's CHECK
holds, so the command line refuses a bad value before anything connects.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from qlsched.core.control import ControlError

RETENTION_MIN_MS: Final = 60_000
"""A minute: below that a typo would empty the history (the schema's CHECK agrees)."""
RETENTION_MAX_MS: Final = 100 * 365 * 86_400_000
"""A hundred years (the schema's CHECK agrees)."""
OFF_WORDS: Final = frozenset({"off", "none"})

_UNITS_MS: Final = {"w": 604_800_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}
_PART = re.compile(r"(\d+)([wdhms])")
_WHOLE = re.compile(r"(?:\d+[wdhms])+")


class RetentionError(ControlError):
    """A retention that cannot be: malformed, or outside its bounds (one line, exit 2)."""


def parse_retention(text: str) -> int | None:
    """Milliseconds of ``text`` (``30d``, ``12h``, ``90m``, ``1d12h``, ``45s``, ``2w``), or
    None for ``off``/``none``.

    Raises:
        RetentionError: a malformed text, a bare number (which unit?), or a duration
            under a minute or over a hundred years.
    """
    word = text.strip().lower()
    if word in OFF_WORDS:
        return None
    if word.isdigit():
        raise RetentionError(f"retention {text!r}: give a unit, e.g. {word}d, {word}h or {word}m")
    if not _WHOLE.fullmatch(word):
        raise RetentionError(
            f"retention {text!r}: expected a duration such as 30d, 12h, 90m or 1d12h"
            " (units w, d, h, m, s), or off"
        )
    ms = sum(int(n) * _UNITS_MS[unit] for n, unit in _PART.findall(word))
    if not RETENTION_MIN_MS <= ms <= RETENTION_MAX_MS:
        raise RetentionError(
            f"retention {text!r}: must be from 1m to 36500d (or off to keep every Run)"
        )
    return ms


def format_retention(ms: int | None) -> str:
    """``ms`` as the largest units that add up to it exactly (``1d12h``), or ``off``."""
    if ms is None:
        return "off"
    parts: list[str] = []
    rest = ms
    for unit in ("d", "h", "m", "s"):
        n, rest = divmod(rest, _UNITS_MS[unit])
        if n:
            parts.append(f"{n}{unit}")
    if rest or not parts:
        parts.append(f"{rest}ms")
    return "".join(parts)


class RetentionSetting(msgspec.Struct, frozen=True, kw_only=True):
    """The database's retention as read now (``retention show``, ``status``)."""

    retention_ms: int | None
    """None: off (every Run is kept)."""
    horizon_ms: int | None
    """Finished Runs that ended before this are deleted (None: off): the database's
    clock when read, less the retention."""
    updated_by: str | None = None
    updated_at_ms: int | None = None

    @property
    def text(self) -> str:
        return format_retention(self.retention_ms)


class PrunedTotals(msgspec.Struct, frozen=True, kw_only=True):
    """Rows retention deleted: one batch's, or database-wide since it was first set."""

    runs: int = 0
    attempts: int = 0
    events: int = 0
    marks: int = 0
    """Recovery marks (``recovery_marks``) of the deleted Attempts."""


class PruneBatch(msgspec.Struct, frozen=True, kw_only=True):
    """One prune statement's outcome: what it deleted, and the horizon it used."""

    pruned: PrunedTotals
    horizon_ms: int | None
    """None: retention is off (nothing was read)."""
    limit: int

    @property
    def full(self) -> bool:
        """The batch was full: more may be waiting past the horizon."""
        return self.pruned.runs >= self.limit
