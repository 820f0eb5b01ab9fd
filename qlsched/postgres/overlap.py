"""Held Runs released and unstarted Runs past their start deadline cancelled, in PostgreSQL
(docs/contract.md §13). Each verb is one statement in autocommit, ``SKIP LOCKED``, bounded
by its limit and ordered by an index, so its cost follows the Runs it acts on, never the
history.

Who calls them: a replica's runs pass (``qlsched.cluster.runs_pass``) both, every few
cadences; a worker ``release_held`` for the trigger of a Run it just ended, so a held Run
starts at once instead of at the next pass. A release that raced an admit of a held Run
(the admit committed after the release's snapshot) leaves it for the next pass: a held
Run never waits on one process's luck.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from qlsched.core.control import TriggerRef
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query


class RunRef(msgspec.Struct, frozen=True):
    """A Run a pass acted on, with its trigger."""

    run_id: str
    project_id: str
    trigger_id: str


async def release_held(
    db: Database, *, limit: int, actor: str, triggers: Sequence[TriggerRef] | None = None
) -> list[RunRef]:
    """Release up to ``limit`` held Runs whose trigger has nothing queued or running (of
    ``triggers`` only, unless None)."""
    projects = None if triggers is None else [t.project_id for t in triggers]
    ids = None if triggers is None else [t.trigger_id for t in triggers]

    async def fn(conn: Connection) -> list[RunRef]:
        rows = await conn.fetch(query("release_held"), limit, actor, projects, ids)
        return [RunRef(r["run_id"], r["project_id"], r["trigger_id"]) for r in rows]

    return await db.run(fn)


async def cancel_unstarted(db: Database, *, limit: int, actor: str) -> list[RunRef]:
    """Cancel up to ``limit`` queued Runs no worker started by their start deadline."""

    async def fn(conn: Connection) -> list[RunRef]:
        rows = await conn.fetch(query("cancel_unstarted"), limit, actor)
        return [RunRef(r["run_id"], r["project_id"], r["trigger_id"]) for r in rows]

    return await db.run(fn)
