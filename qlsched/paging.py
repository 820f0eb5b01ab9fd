"""Keyset pages of ``/v1/schedules`` (both profiles): the page size, the cursor a page
hands out and how it is read back.

A cursor is the last row's key, ``PROJECT/TRIGGER`` (ids never hold ``/``), so it is
readable, stable across replicas and releases, and needs no state on the server. The next
page is every row whose key sorts after it: a row inserted or deleted meanwhile moves no
other row across a page boundary, so each row present from the first page to the last is
seen exactly once (an offset would skip or repeat rows when the table changes).
"""

from __future__ import annotations

import re
from typing import Final, Literal
from urllib.parse import parse_qs

import msgspec

from qlsched.core.specs import ID_RULE
from qlsched.core.store import ScheduleView

_CURSOR: Final = re.compile(rf"({ID_RULE})/({ID_RULE})")
SCHEDULES_LIMIT_MAX: Final = 1000
"""The largest page (and the default)."""


class SchedulesPage(msgspec.Struct, frozen=True):
    schedules: list[ScheduleView]
    next_cursor: str | None = None
    """``PROJECT/TRIGGER`` of the page's last row when the page is full, else None."""


def cursor_of(query_string: bytes) -> tuple[str, str] | Literal[False] | None:
    """The key after which the page starts (None: the first page; False: not a cursor)."""
    values = parse_qs(query_string.decode("latin-1")).get("cursor")
    if not values:
        return None
    match = _CURSOR.fullmatch(values[-1])
    return False if match is None else (match.group(1), match.group(2))


def limit_of(query_string: bytes) -> int | None:
    """``?limit=N`` (1..``SCHEDULES_LIMIT_MAX``; the largest when absent), None when bad."""
    values = parse_qs(query_string.decode("latin-1")).get("limit")
    if not values:
        return SCHEDULES_LIMIT_MAX
    try:
        limit = int(values[-1])
    except ValueError:
        return None
    return limit if 1 <= limit <= SCHEDULES_LIMIT_MAX else None


def page_of(rows: list[ScheduleView], limit: int) -> SchedulesPage:
    """The response for ``rows``: a full page points at its last row (the next page may be
    empty: telling would cost a read of one more row on every page)."""
    last = rows[-1] if rows and len(rows) >= limit else None
    return SchedulesPage(rows, None if last is None else f"{last.project_id}/{last.trigger_id}")
