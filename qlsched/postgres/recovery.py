"""Startup recovery: mark runtime-owned Attempts that are not pristine, fail closed.

A pristine queued Attempt (exactly the shape admission wrote) belongs to the dispatcher
and is left alone; treating it as failed would re-run work nobody lost. Every other
runtime-owned, non-terminal Attempt (a drifted field, ``dispatching``, a newer Attempt) is
a candidate: it is recorded in ``recovery_marks`` with the first reason found. The Attempt
itself is not rewritten: placement keeps authority over execution state.
"""

from __future__ import annotations

import uuid

import msgspec

from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query


class RecoveryCandidate(msgspec.Struct, frozen=True):
    attempt_id: uuid.UUID
    run_id: uuid.UUID
    reason: str


class RecoveryReport(msgspec.Struct, frozen=True):
    candidates: list[RecoveryCandidate]
    marked: int


async def recovery_candidates(conn: Connection) -> list[RecoveryCandidate]:
    rows = await conn.fetch(query("recovery_candidates"))
    return [RecoveryCandidate(r["attempt_id"], r["run_id"], r["reason"]) for r in rows]


async def recover(db: Database, *, replica: str) -> RecoveryReport:
    """Read the recovery source and mark its candidates (one transaction, one crossing)."""

    async def fn(conn: Connection) -> RecoveryReport:
        async with conn.transaction():
            found = await recovery_candidates(conn)
            status = await conn.execute(
                query("mark_for_recovery"),
                [c.attempt_id for c in found],
                [c.run_id for c in found],
                [c.reason for c in found],
                replica,
            )
        return RecoveryReport(candidates=found, marked=int(status.split()[-1]))

    return await db.run(fn)
