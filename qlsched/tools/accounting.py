"""Every occurrence in exactly one bucket: the per-trigger accounting, checked.

For a schedule row, every occurrence of its cron from ``decided_from_ms`` (where cron began
deciding this revision) up to its cursor was decided exactly once: admitted (a Run under
its cron key, by cron or by a backfill), skipped by policy, coalesced by a late Fire,
counted as paused by a resume, or skipped by the overlap policy (a Run of the trigger was
unfinished). A Run its start deadline cancelled is still that occurrence's Run. A
backfill that admits an occurrence cron had counted as not run moves it into the Runs, and
``backfilled_total`` says how many did. A Run that retention deleted is still a Run:
``retention_pruned.window_runs`` counts those of the window (``pruned``), so::

    runs + pruned + skipped + coalesced + paused + overlap_skipped - backfilled == occurrences

``already_admitted_total`` (cron found the key taken) is no bucket: the Run that holds the
key is. The counters are the row's lifetime totals, so the check holds for a row whose
revision has not changed since its first initialisation (a re-publish with a change
starts a new window but keeps the totals). The soak and the tests run it; it reads one
row per trigger and counts Runs through the recent-runs index.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from qlsched.core.cron import parse_cron
from qlsched.core.cron_count import count_between
from qlsched.postgres.pool import Connection
from qlsched.tools.queries import tool_query


class Accounting(msgspec.Struct, frozen=True, kw_only=True):
    """One schedule row's window and its buckets."""

    project_id: str
    trigger_id: str
    decided_from_ms: int
    cursor_ms: int
    occurrences: int
    runs: int
    pruned: int
    """Runs of the window that retention deleted."""
    skipped: int
    coalesced: int
    paused: int
    backfilled: int
    already_admitted: int
    overlap_skipped: int = 0
    deadline_cancelled: int = 0
    """Of ``runs``: cancelled by their start deadline (shown, no bucket of its own)."""

    @property
    def bucketed(self) -> int:
        """Occurrences the buckets account for (each exactly once)."""
        return (
            self.runs
            + self.pruned
            + self.skipped
            + self.coalesced
            + self.paused
            + self.overlap_skipped
            - self.backfilled
        )

    @property
    def balanced(self) -> bool:
        return self.bucketed == self.occurrences

    def describe(self) -> str:
        return (
            f"{self.project_id}/{self.trigger_id}: {self.occurrences} occurrences in"
            f" [{self.decided_from_ms}, {self.cursor_ms}) but runs {self.runs} + pruned"
            f" {self.pruned} + skipped"
            f" {self.skipped} + coalesced {self.coalesced} + paused {self.paused}"
            f" + overlap-skipped {self.overlap_skipped} - backfilled {self.backfilled}"
            f" = {self.bucketed}"
        )


async def account(conn: Connection, projects: Sequence[str] | None = None) -> list[Accounting]:
    """The accounting of every schedule row with a window (of ``projects``, or all)."""
    rows = await conn.fetch(
        tool_query("accounting_rows"), None if projects is None else list(projects)
    )
    out = []
    for r in rows:
        cron = parse_cron(r["cron"], r["timezone"], dst_gap=r["dst_gap"], dst_fold=r["dst_fold"])
        start, cursor = r["decided_from_ms"], r["next_fire_at_ms"]
        out.append(
            Accounting(
                project_id=r["project_id"],
                trigger_id=r["trigger_id"],
                decided_from_ms=start,
                cursor_ms=cursor,
                occurrences=count_between(cron, start - 1, cursor - 1),
                runs=int(r["runs"]),
                pruned=int(r["pruned_runs"]),
                skipped=r["skipped_total"],
                coalesced=r["coalesced_total"],
                paused=r["paused_total"],
                backfilled=r["backfilled_total"],
                already_admitted=r["already_admitted_total"],
                overlap_skipped=r["overlap_skipped_total"],
                deadline_cancelled=r["deadline_cancelled_total"],
            )
        )
    return out


def unbalanced(accounts: Sequence[Accounting]) -> list[str]:
    """A line for each row whose buckets do not add up to its occurrences."""
    return [a.describe() for a in accounts if not a.balanced]
