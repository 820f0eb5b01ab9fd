"""The exactly-once audit at scale: ``verify_exactly_once``'s checks, set-based.

Why: the verifier reads every Run into Python, which for a million Runs takes minutes. Here
the database does the work (``sql/audit.sql``) and returns counts and a bounded sample of
offending keys. The one thing SQL cannot do is enumerate a cron: the first statement
returns the distinct windows (cron, zone, DST policy, first, end) the triggers share, core
enumerates each once, and the second statement matches the Runs against them. A bench
whose million triggers share one cron enumerates it once.

Same meaning as ``qlsched.tools.verify`` (its docstring has the rules, request-aware
included): duplicates and lost are exact counts; ``bad_*`` count Runs (the verifier lists
each problem of a Run). One difference: a cron-keyed Run inside a recorded backfill range
is taken as accounted for without checking it is an occurrence of the cron (the verifier
checks it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import msgspec

from qlsched.postgres.pool import Connection
from qlsched.tools.queries import tool_query
from qlsched.tools.verify import MAX_OCCURRENCES, Occurrence, TriggerRef, occurrences

SAMPLE = 10
"""Offending keys returned per kind."""


class TriggerLoss(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str
    lost: int


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    runs: int
    duplicates: int
    """Occurrences with more than one cron-keyed Run."""
    lost: int
    unexpected: int
    bad_runs: int
    bad_attempts: int
    bad_events: int
    manual: int
    """Trigger-now Runs that match their recorded request."""
    backfilled: int
    """Cron-keyed Runs inside a recorded backfill range."""
    skipped: int
    coalesced: int
    windows: int
    """Distinct windows core enumerated."""
    duplicate_sample: list[Occurrence]
    lost_sample: list[TriggerLoss]
    unexpected_sample: list[Occurrence]
    malformed_sample: list[uuid.UUID]
    """Runs with any shape problem."""

    @property
    def malformed(self) -> int:
        """Runs in a wrong shape plus Runs at no expected occurrence (the bench's figure)."""
        return self.bad_runs + self.bad_attempts + self.bad_events + self.unexpected

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.lost or self.malformed)


class _Window(msgspec.Struct, frozen=True):
    cron: str
    timezone: str
    dst_gap: str
    dst_fold: str
    first_ms: int
    end_ms: int
    triggers: int


async def audit_exactly_once(
    conn: Connection,
    *,
    first_cursors: Mapping[TriggerRef, int] | None = None,
    sample: int = SAMPLE,
) -> AuditReport:
    """Audit every trigger and Run in the database in one read-only snapshot.

    Args:
        conn: any role that may read the qlsched tables (the observer's is enough).
        first_cursors: as for ``verify_exactly_once``.
        sample: at most this many offending keys of each kind.

    Raises:
        ValueError: more than ``MAX_OCCURRENCES`` occurrences over the distinct windows.
    """
    firsts = dict(first_cursors or {})
    given = (
        [p for p, _ in firsts],
        [t for _, t in firsts],
        list(firsts.values()),
    )
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute(tool_query("audit_work_mem"))
        windows = [
            _Window(**dict(r)) for r in await conn.fetch(tool_query("audit_windows"), *given)
        ]
        ords: list[int] = []
        ats: list[int] = []
        for i, w in enumerate(windows, start=1):
            found = occurrences(
                w.cron,
                w.timezone,
                w.dst_gap,
                w.dst_fold,
                w.first_ms,
                w.end_ms,
                who=f"cron {w.cron!r} from {w.first_ms}",
            )
            ords += [i] * len(found)
            ats += found
            if len(ats) > MAX_OCCURRENCES:
                raise ValueError(f"more than {MAX_OCCURRENCES} occurrences over the windows")
        row = await conn.fetchrow(
            tool_query("audit_counts"),
            *given,
            [w.cron for w in windows],
            [w.timezone for w in windows],
            [w.dst_gap for w in windows],
            [w.dst_fold for w in windows],
            [w.first_ms for w in windows],
            [w.end_ms for w in windows],
            ords,
            ats,
            sample,
        )
    assert row is not None  # an aggregate row always comes back

    def triples(text: str | None) -> list[tuple[str, str, int]]:
        return msgspec.json.decode(text or "[]", type=list[tuple[str, str, int]])

    return AuditReport(
        runs=int(row["runs"]),
        duplicates=int(row["duplicates"]),
        lost=int(row["lost"] or 0),
        unexpected=int(row["unexpected"]),
        bad_runs=int(row["bad_runs"]),
        bad_attempts=int(row["bad_attempts"]),
        bad_events=int(row["bad_events"]),
        manual=int(row["manual"]),
        backfilled=int(row["backfilled"]),
        skipped=int(row["skipped"] or 0),
        coalesced=int(row["coalesced"] or 0),
        windows=len(windows),
        duplicate_sample=[Occurrence(*t) for t in triples(row["duplicate_sample"])],
        lost_sample=[TriggerLoss(*t) for t in triples(row["lost_sample"])],
        unexpected_sample=[Occurrence(*t) for t in triples(row["unexpected_sample"])],
        malformed_sample=[uuid.UUID(str(u)) for u in row["malformed_sample"] or []],
    )
