"""The DST policy per trigger on PostgreSQL (docs/contract.md §3): published with the
trigger, returned by the claim, used by the decision, part of the revision.

The database clock cannot be moved, so decisions at a transition are taken the way a claim
taken then would be: the cursor sits on a real (past) fold of America/New_York, every claim
is a real claim, and ``decision_for(claim, now_ms=...)`` decides at the cursor's own instant;
every admit is the real fenced batch admit. The transition dates come from zoneinfo
relative to the database's now, so the tests do not age.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import takewhile
from zoneinfo import ZoneInfo

import pytest

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.control import Resumed, ResumeOutcome, TriggerRef
from qlsched.core.cron import iter_after, parse_cron
from qlsched.core.keys import fire_request, idempotency_key
from qlsched.core.outcomes import Admitted, Fire, Initialize, Initialized
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres.control import pause, resume
from qlsched.postgres.pool import Connection
from tests.integration.adapter_support import LEASE_MS, Env, decision_for, trigger

NY = ZoneInfo("America/New_York")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp()) * 1000


def _transition_day(now_ms: int, *, step: int, fold: bool) -> date:
    """The nearest New York fall-back (``fold``) or spring-forward day from ``now_ms``,
    searching backwards (``step = -1``) or forwards (``step = 1``)."""
    day = datetime.fromtimestamp(now_ms / 1000, UTC).date()
    while True:
        before = datetime(day.year, day.month, day.day, tzinfo=NY).utcoffset()
        after = datetime(day.year, day.month, day.day, 12, tzinfo=NY).utcoffset()
        assert before is not None
        assert after is not None
        if (after < before) if fold else (after > before):
            return day
        day += timedelta(days=step)


def _publish_file(*triggers: tuple[str, str, str, str]) -> PublishFile:
    """Project ``p``, task ``task``; triggers (id, cron, dst_gap, dst_fold) in New York."""
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="task", command="true")],
        triggers=[
            trigger("p", t, cron=c, timezone=NY.key, dst_gap=g, dst_fold=f)
            for t, c, g, f in triggers
        ],
    )


async def _admit_through(env: Env, start_ms: int, until_ms: int) -> list[Admitted]:
    """Initialize the one trigger as a claim taken at ``start_ms`` would, then admit each
    occurrence up to ``until_ms`` as a claim taken at that occurrence would."""
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    decision = decision_for(claim, now_ms=start_ms)
    assert isinstance(decision, Initialize)
    assert isinstance(await env.store.initialize(claim, decision), Initialized)
    admitted: list[Admitted] = []
    while True:
        [claim] = await env.store.claim("r1", 1, LEASE_MS)
        assert claim.cursor_ms is not None
        if claim.cursor_ms > until_ms:
            await env.store.release(claim)
            return admitted
        decision = decision_for(claim, now_ms=claim.cursor_ms)
        assert isinstance(decision, Fire)
        [outcome] = await env.store.admit([fire_request(claim, decision)])
        assert isinstance(outcome, Admitted), outcome
        admitted.append(outcome)


@pytest.mark.parametrize(("fold", "instants"), [("first", [0]), ("last", [1]), ("both", [0, 1])])
async def test_a_fold_admits_the_instants_its_policy_names(
    env: Env, fold: str, instants: list[int]
) -> None:
    """Rule: a published ``30 1 * * *`` New York trigger is admitted on the fall-back day at
    the first instant of 01:30 (``first``), the second (``last``), or both, as two Runs with
    distinct idempotency keys; each Run is the occurrence the cursor held."""
    day = _transition_day(await env.now_ms(), step=-1, fold=True)
    wall = datetime(day.year, day.month, day.day, 1, 30, tzinfo=NY)
    both = [_ms(wall), _ms(wall.replace(fold=1))]
    assert both[1] - both[0] == 3_600_000
    await env.publish(_publish_file(("g", "30 1 * * *", "shift", fold)))

    admitted = await _admit_through(env, both[0] - 3_600_000, both[1] + 60_000)

    assert [a.scheduled_for_ms for a in admitted] == [both[i] for i in instants]
    assert [a.idempotency_key for a in admitted] == [
        idempotency_key("g", 1, both[i]) for i in instants
    ]
    runs = await env.su("SELECT scheduled_for_ms, idempotency_key FROM qlsched.runs")
    assert sorted(r["scheduled_for_ms"] for r in runs) == [both[i] for i in instants]
    assert len({r["idempotency_key"] for r in runs}) == len(instants)


async def test_the_coordinator_decides_with_the_policy_the_claim_returns(env: Env) -> None:
    """Rule: the replica's own round (claim, cached spec, decision at the database's now)
    initializes a fixed-hour trigger whose next wall time is in the coming spring-forward gap
    at the gap's end under ``shift`` and on the next year's date under ``skip``."""
    day = _transition_day(await env.now_ms(), step=1, fold=False)
    cron = f"30 2 {day.day} {day.month} *"
    await env.publish(_publish_file(("a", cron, "shift", "first"), ("b", cron, "skip", "first")))

    stats = await Coordinator(env.store, Config(owner="r1"), env.sink, Metrics()).run_round()

    assert stats.initialized == 2, stats
    cursors = {t: r["next_fire_at_ms"] for t, r in (await env.schedules()).items()}
    year = day.year + 1
    while True:  # the same date next in a year when 02:30 exists there
        wall = datetime(year, day.month, day.day, 2, 30, tzinfo=NY)
        if wall.astimezone(UTC).astimezone(NY).replace(tzinfo=None) == wall.replace(tzinfo=None):
            break
        year += 1
    assert cursors == {
        "a": _ms(datetime(day.year, day.month, day.day, 3, 0, tzinfo=NY)),
        "b": _ms(wall),
    }


async def test_republishing_with_another_policy_is_a_new_revision(env: Env) -> None:
    """Rule: the policy is part of the trigger's content: republishing with another
    ``dst_fold`` is a new revision (cursor cleared, digest changed) whose claim carries the
    new policy; the same file again changes nothing."""
    await env.publish(_publish_file(("g", "30 1 * * *", "shift", "first")))
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    assert (claim.trigger_revision, claim.dst_gap, claim.dst_fold) == (1, "shift", "first")
    await env.store.initialize(claim, Initialize(next_ms=claim.claimed_at_ms + 3_600_000))

    changed = await env.publish(_publish_file(("g", "30 1 * * *", "skip", "both")))

    assert changed.triggers == {"p/g": "changed"}
    row = await env.schedule("p", "g")
    assert (row["trigger_revision"], row["next_fire_at_ms"]) == (2, None)
    [claim2] = await env.store.claim("r1", 1, LEASE_MS)
    assert (claim2.trigger_revision, claim2.dst_gap, claim2.dst_fold) == (2, "skip", "both")
    assert claim2.trigger_digest != claim.trigger_digest
    again = await env.publish(_publish_file(("g", "30 1 * * *", "skip", "both")))
    assert again.triggers == {"p/g": "unchanged"}


async def test_prune_and_repin_keep_the_policy(env: Env) -> None:
    """Rule: a trigger published again from its stored row (disabled by ``prune``, re-pinned
    by a changed task) keeps its DST policy: only ``enabled`` or the task pin changes."""
    await env.publish(
        _publish_file(
            ("kept", "30 1 * * *", "skip", "last"), ("pruned", "0 2 * * *", "skip", "both")
        )
    )
    smaller = _publish_file(("kept", "30 1 * * *", "skip", "last"))
    await env.publish(smaller, prune=True)
    task_changed = PublishFile(
        projects=smaller.projects,
        tasks=[TaskEntry(project="p", id="task", command="false")],
        triggers=[],
    )
    result = await env.publish(task_changed)

    assert result.triggers == {"p/kept": "repinned", "p/pruned": "repinned"}
    rows = await env.su(
        "SELECT trigger_id, enabled, revision, dst_gap, dst_fold FROM qlsched.triggers"
        " ORDER BY trigger_id"
    )
    assert [tuple(r) for r in rows] == [
        ("kept", True, 2, "skip", "last"),
        ("pruned", False, 3, "skip", "both"),
    ]


@pytest.mark.parametrize("fold", ["first", "both"])
async def test_resume_counts_the_pause_by_the_triggers_policy(env: Env, fold: str) -> None:
    """Rule: a resume counts the occurrences inside a pause with the trigger's DST policy,
    as the replicas would have fired them: a pause over the last fall-back day counts its
    01:30 twice under ``both``, once under ``first``."""
    day = _transition_day(await env.now_ms(), step=-1, fold=True)
    first = _ms(datetime(day.year, day.month, day.day, 1, 30, tzinfo=NY))
    await env.publish(_publish_file(("g", "30 1 * * *", "shift", fold)))

    async def pause_it(conn: Connection) -> object:
        return await pause(conn, TriggerRef("p", "g"), note=None, actor=None)

    async def resume_it(conn: Connection) -> ResumeOutcome:
        return await resume(conn, TriggerRef("p", "g"), catch_up="skip", actor=None)

    await env.admin(pause_it)
    await env.set_cursor("p", "g", first)
    outcome = await env.admin(resume_it)

    assert isinstance(outcome, Resumed), outcome
    schedule = parse_cron("30 1 * * *", NY.key, dst_fold=fold)
    inside = list(takewhile(lambda t: t <= outcome.resumed_at_ms, iter_after(schedule, first - 1)))
    assert outcome.inside == len(inside)
    days = len(list(takewhile(lambda t: t <= outcome.resumed_at_ms, iter_after(
        parse_cron("30 1 * * *", NY.key), first - 1))))  # fmt: skip
    assert len(inside) == days + (1 if fold == "both" else 0)
