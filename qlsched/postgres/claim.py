"""The claim statement, the rows it and the fenced writes return, and each lease's deadline.

The claim is one statement sent alone in autocommit on the READ COMMITTED claim pool, so the
lease commits at once. The deadlines kept here are this process's reckoning of when each
lease runs out (Trio's clock), used only to stop retrying in time; the database decides
every fence with its own clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import trio

from qlsched.core.fence import Claim, ClaimFence, FireRequest, ObservedSchedule
from qlsched.core.lease import retry_deadline_s
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query

CLAIM_SETTINGS: Final[Mapping[str, str]] = {
    "enable_seqscan": "off",
    "jit": "off",
    "plan_cache_mode": "force_generic_plan",
}
"""Server settings of the claim pool. Generic plans: the claim is every round's hot
statement, and re-planning it at each call cost more than running it; its scans are
index-ordered, which a small table's plan would otherwise trade for a sequential scan
(docs/performance.md, Claim). No JIT: a plan that must still read a table whole (the
one-row ``retention`` setting, in every prune batch) costs 1e10 more with sequential
scans off, far above ``jit_above_cost``, and a server built with LLVM then compiled the
statement at every call (0.4 s of CPU per prune batch; docs/performance.md, JIT)."""


def fence_from_row(row: Any) -> ClaimFence:
    """The four-part fence of a claimed row (schedule row or request), as stored."""
    return ClaimFence(
        owner=row["claim_owner"],
        token=row["claim_token"],
        version=row["claim_version"],
        expires_at_ms=row["claim_expires_at_ms"],
    )


def _claim_from_row(row: Any) -> Claim:
    return Claim(
        project_id=row["project_id"],
        trigger_id=row["trigger_id"],
        trigger_revision=row["trigger_revision"],
        state_version=row["state_version"],
        fence=fence_from_row(row),
        cursor_ms=row["next_fire_at_ms"],
        claimed_at_ms=row["updated_at_ms"],
        cron=row["cron"],
        timezone=row["timezone"],
        misfire_policy=row["misfire_policy"],
        misfire_grace_ms=row["misfire_grace_ms"],
        trigger_digest=row["content_digest"],
        task_id=row["task_id"],
        task_revision=row["task_revision"],
        execution_revision_id=row["execution_revision_id"],
        locator=row["locator"],
        dst_gap=row["dst_gap"],
        dst_fold=row["dst_fold"],
        jitter_ms=row["jitter_ms"],
    )


_OBSERVED_COLUMNS: Final = ObservedSchedule.__struct_fields__
"""The schedule columns a fenced write reads back, named as ``ObservedSchedule``'s fields."""


def observed_schedule(row: Any) -> ObservedSchedule | None:
    """The schedule row as a fenced write's statement read it back, or None: not there."""
    if row["trigger_revision"] is None:
        return None
    return ObservedSchedule(**{name: row[name] for name in _OBSERVED_COLUMNS})


async def claim_rows(
    db: Database, owner: str, limit: int, lease_ms: int, lookahead_ms: int = 0
) -> tuple[list[Claim], int | None]:
    """Claim up to ``limit`` due or uninitialised rows for ``owner`` (one statement), rows
    due within ``lookahead_ms`` counting as due; also how long from the claim until the next
    unclaimed row enters that window (database ms; None: no row is waiting to fall due)."""
    sql = query("claim")

    async def fn(conn: Connection) -> list[Any]:
        return list(await conn.fetch(sql, owner, limit, lease_ms, lookahead_ms))

    rows = await db.run(fn)
    claims = [_claim_from_row(r) for r in rows if r["project_id"] is not None]
    first = rows[0] if rows else None
    if first is None or first["next_due_ms"] is None:
        return claims, None
    return claims, int(first["next_due_ms"]) - int(first["now_ms"]) - lookahead_ms


class LeaseDeadlines:
    """When each outstanding claim's lease runs out by Trio's clock, keyed by its token.

    A claim is forgotten once written (admitted or ended); one left to expire is dropped at
    the next claim after its deadline has passed.
    """

    def __init__(self) -> None:
        self._deadlines: dict[uuid.UUID, float] = {}

    def record(self, claims: Sequence[Claim], lease_ms: int) -> None:
        """Note ``claims``' deadline (now plus the lease, less the margin), just after their
        claim statement returned; forget deadlines already past."""
        now = trio.current_time()
        deadline = retry_deadline_s(now, lease_ms)
        if self._deadlines:  # claims left to expire are never written here: forget them
            self._deadlines = {k: v for k, v in self._deadlines.items() if v > now}
        for c in claims:
            self._deadlines[c.fence.token] = deadline

    def left_s(self, fires: Sequence[FireRequest]) -> float:
        """Seconds until the first of ``fires``' leases runs out (<= 0: no time left)."""
        now = trio.current_time()
        return min(self._deadlines.get(f.claim.fence.token, now) for f in fires) - now

    def forget(self, claims: Sequence[Claim]) -> None:
        for c in claims:
            self._deadlines.pop(c.fence.token, None)
