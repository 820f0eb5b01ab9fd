"""Observability reads whose cost stays flat at a million triggers and ten million Runs.

``status``, a ``/metrics`` scrape and ``/v1/schedules`` must answer in well under a tenth of
a second whatever the size of the tables, so none of these reads walks a whole table:

* the due backlog is counted up to ``DUE_BACKLOG_LIMIT`` rows, walking the claim and
  expiry indexes (a count that reaches the limit means at least that many);
* ``/v1/schedules`` pages by key (keyset pagination): a page after a key walks the primary
  keys from that key, and a row inserted or deleted while a client pages moves no other row
  from one page to another;
* ``status``'s refused triggers are looked for among the rows an admit can meet (the
  longest-due unclaimed rows and the claimed ones), where a lasting refusal stays: its
  cursor does not move and its claims are left to expire. ``qlsched check`` still reads
  every row.
"""

from __future__ import annotations

from typing import Final

import msgspec

from qlsched.core.store import DUE_BACKLOG_LIMIT, ScheduleView
from qlsched.postgres.health import RefusedTrigger
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query

REFUSED_WINDOW: Final = 1000
"""Rows of each kind (longest-due unclaimed, claimed) ``status`` checks for refusals."""


class DueBacklog(msgspec.Struct, frozen=True):
    """Active rows due now, counted up to ``limit``."""

    rows: int
    """At most ``limit``."""
    capped: bool
    """More than ``limit`` rows are due: ``rows`` is a lower bound."""
    limit: int


async def due_backlog(conn: Connection, *, limit: int = DUE_BACKLOG_LIMIT) -> DueBacklog:
    """The due backlog counted up to ``limit`` (one more row is read to tell "exactly
    ``limit``" from "more")."""
    counted = int(await conn.fetchval(query("due_backlog_bounded"), limit + 1))
    return DueBacklog(rows=min(counted, limit), capped=counted > limit, limit=limit)


async def schedules_after(
    conn: Connection, after: tuple[str, str], *, limit: int
) -> list[ScheduleView]:
    """Up to ``limit`` schedule rows after key ``after`` = (project, trigger), in key order."""
    rows = await conn.fetch(query("list_schedules_after"), after[0], after[1], limit)
    return [ScheduleView(**dict(r)) for r in rows]


async def refused_due_triggers(
    conn: Connection, *, limit: int = 1000, window: int = REFUSED_WINDOW
) -> list[RefusedTrigger]:
    """``health.refused_triggers`` among the ``window`` longest-due unclaimed rows and the
    ``window`` claimed rows whose claims expire first."""
    rows = await conn.fetch(query("refused_due_triggers"), limit, window)
    return [RefusedTrigger(**dict(r)) for r in rows]
