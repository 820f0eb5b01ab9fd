"""Pause and resume (docs/contract.md §10), decided without I/O: what a resume does to a row.

Pause state lives beside the spec, never in it: no digest or revision covers it, so a
re-publish neither unpauses a trigger nor counts as a change, and a paused trigger keeps its
revision and cursor. A paused row is not ``active``, so the claim never sees it.

A resume sets the cursor from the database time ``now`` (``plan_resume``). The occurrences
that fell inside the pause are the ones the cursor would have reached: from the cursor
(inclusive: it is the next occurrence not yet run) to ``now``; for a revision with no
cursor yet (published, or re-published, while paused), those strictly after the later of
the pause and the revision, to ``now``. Counted exactly with ``count_between`` (cost by
months and zone transitions, never one step per occurrence), and never silently dropped:

| catch-up    | cursor becomes                         | added to ``paused_total``   |
|-------------|----------------------------------------|-----------------------------|
| ``skip``    | the first occurrence after ``now``     | all of them                 |
| ``fire_once`` | the latest of them (``catch_up_at_ms``) | all but that one          |

With ``fire_once`` the claim hands that cursor value to the decision as policy
``fire_once``, so it fires once (under the usual fence and its cron key) however far past
the trigger's misfire grace it is. With nothing inside the pause, both are the same: a
cursor still in the future is kept, a missing one stays missing (the first round
initialises it, as for any new revision).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from qlsched.core.cron import CronSchedule, next_after
from qlsched.core.cron_count import count_between

CatchUp = Literal["skip", "fire_once"]
CATCH_UPS: tuple[CatchUp, ...] = ("skip", "fire_once")


class ResumePlan(msgspec.Struct, frozen=True):
    """The schedule row's new cursor and counter after a resume (all epoch ms)."""

    next_fire_at_ms: int | None
    catch_up_at_ms: int | None
    """The occurrence left to fire once whatever the grace (``fire_once``), else None."""
    inside: int
    """Occurrences that fell inside the pause."""
    paused: int
    """Of those, the ones that will not run: what ``paused_total`` grows by."""
    decided_from_ms: int | None = None
    """For a row without a cursor: the first occurrence this resume decides (counts or
    fires), where the row's accounting window starts; None: the row keeps its own."""

    @classmethod
    def unscheduled(cls, cursor_ms: int | None) -> ResumePlan:
        """An archived project's or a disabled trigger's resume: nothing would have run, so
        nothing is counted and the cursor stays (the publish that makes it active starts
        a new revision, and cursor, anyway)."""
        return cls(next_fire_at_ms=cursor_ms, catch_up_at_ms=None, inside=0, paused=0)


def latest_occurrence(schedule: CronSchedule, after_ms: int, until_ms: int) -> int | None:
    """The last occurrence ``t`` with ``after_ms < t <= until_ms``, or None.

    A bisection over whole seconds on ``count_between``: about forty counts whatever the
    interval holds. Rejected: stepping ``next_after`` from ``after_ms`` (a year of an
    every-second trigger is 31 million steps).
    """
    total = count_between(schedule, after_ms, until_ms)
    if total == 0:
        return None
    lo, hi = after_ms // 1000, until_ms // 1000  # count(lo) = 0 < total = count(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_between(schedule, after_ms, mid * 1000) >= total:
            hi = mid
        else:
            lo = mid
    return hi * 1000


def plan_resume(
    schedule: CronSchedule,
    *,
    cursor_ms: int | None,
    since_ms: int,
    now_ms: int,
    catch_up: CatchUp,
) -> ResumePlan:
    """What resuming a paused row does (see the module's table).

    Args:
        schedule: the current revision's cron.
        cursor_ms: the row's cursor, unchanged since the pause unless a re-publish cleared it.
        since_ms: for a row without a cursor, where its pause began for this revision: the
            later of the pause and the revision's publish.
        now_ms: the database time of the resume.
        catch_up: ``skip`` counts every occurrence inside; ``fire_once`` fires the latest.
    """
    latest: int | None
    if cursor_ms is not None:
        if cursor_ms > now_ms:
            return ResumePlan(next_fire_at_ms=cursor_ms, catch_up_at_ms=None, inside=0, paused=0)
        inside = 1 + count_between(schedule, cursor_ms, now_ms)
        latest = latest_occurrence(schedule, cursor_ms, now_ms) or cursor_ms
    else:
        inside = count_between(schedule, since_ms, now_ms)
        latest = latest_occurrence(schedule, since_ms, now_ms)
        if latest is None:
            return ResumePlan(next_fire_at_ms=None, catch_up_at_ms=None, inside=0, paused=0)
    first = None if cursor_ms is not None else next_after(schedule, since_ms)
    if catch_up == "fire_once":
        return ResumePlan(
            next_fire_at_ms=latest,
            catch_up_at_ms=latest,
            inside=inside,
            paused=inside - 1,
            decided_from_ms=first,
        )
    return ResumePlan(
        next_fire_at_ms=next_after(schedule, now_ms),
        catch_up_at_ms=None,
        inside=inside,
        paused=inside,
        decided_from_ms=first,
    )
