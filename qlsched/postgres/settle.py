"""Initialize, skip or release: a claim ended without a Run, in one fenced statement.

The statement (``settle``) sets or keeps the cursor and clears the claim under the whole
fence, on the claim pool, and reads the row back in the same snapshot, so a refused write
names the part that failed. A lost connection is ``CommitUnknown``, never re-sent.
"""

from __future__ import annotations

from typing import Any

from qlsched.core.fence import Claim, failed_part, refusal
from qlsched.core.outcomes import CommitUnknown, Outcome, RevisionChanged, StoreFailed
from qlsched.postgres.claim import observed_schedule
from qlsched.postgres.errors import ErrorKind, classify, sqlstate
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query


async def end_claim(
    db: Database,
    claim: Claim,
    done: Outcome,
    *,
    next_ms: int | None,
    skipped: int = 0,
    failure: str | None = None,
) -> Outcome:
    """End ``claim`` without a Run: the cursor becomes ``next_ms`` (None: it stays, a
    release), ``skipped`` adds to the row's count, ``failure`` (a release only) names why
    the claim is given back and counts it on the row. ``done`` when the write landed, else
    the outcome naming what refused it."""
    sql = query("settle")
    f = claim.fence

    async def fn(conn: Connection) -> Any:
        return await conn.fetchrow(
            sql,
            claim.project_id,
            claim.trigger_id,
            f.owner,
            f.token,
            f.version,
            claim.state_version,
            claim.trigger_revision,
            claim.cursor_ms,
            next_ms is None,
            next_ms,
            skipped,
            claim.trigger_digest,
            failure,
        )

    try:
        row = await db.run(fn)
    except Exception as exc:
        if classify(exc) is ErrorKind.CONNECTION:
            return CommitUnknown(claim.project_id, claim.trigger_id, exception=type(exc).__name__)
        return StoreFailed(
            claim.project_id,
            claim.trigger_id,
            sqlstate=sqlstate(exc),
            exception=type(exc).__name__,
        )
    if row["settled_at_ms"] is not None:
        return done
    observed, now_ms = observed_schedule(row), row["now_ms"]
    part = failed_part(claim, observed, now_ms, claim.cursor_ms)
    if part is None and not row["spec_ok"]:
        return RevisionChanged(claim.project_id, claim.trigger_id, part="trigger")
    return part or refusal(claim, observed, now_ms, claim.cursor_ms)
