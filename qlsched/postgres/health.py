"""Triggers the cluster cannot admit until someone acts: read for ``status`` and ``check``.

A refusal that heals by itself (a re-publish racing a round) is normal operation; one that
lasts (a pin that moved without its trigger, a task digest that disagrees with its pinned
execution revision, an inactive project still marked active) would otherwise only show as a
counter that keeps rising. This names each such trigger with the reason admit gives.
"""

from __future__ import annotations

import msgspec

from qlsched.postgres.errors import is_permission_denied
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


class RefusedTrigger(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str
    reason: str
    """``outcome:part``, as the admit outcome names it (``revision_changed:task``)."""


async def refused_triggers(conn: Connection, *, limit: int = 1000) -> list[RefusedTrigger]:
    return [RefusedTrigger(**dict(r)) for r in await conn.fetch(query("refused_triggers"), limit)]


async def readable_refusals(conn: Connection) -> list[RefusedTrigger]:
    """``refused_triggers`` for a role that may not read the specs (``check`` runs as any
    role): such a role sees none, and readiness has already said what it needed to."""
    try:
        return await refused_triggers(conn)
    except Exception as exc:
        if not is_permission_denied(exc):
            raise
        return []
