"""Pause and resume on PostgreSQL (docs/contract.md §10): a paused row is never claimed,
re-publishing keeps it paused, resume counts exactly what fell inside the pause, and
``--catch-up fire_once`` admits the latest of them exactly once under its cron key.

The database's clock cannot be moved, so a long pause is made the way the other adapter
tests make a late trigger: the superuser moves the stored times (cursor, pause start) back,
and every expectation is computed from the database time the action itself reports. The
expected counts step through ``iter_after`` one occurrence at a time, independently of the
``count_between`` arithmetic the code uses.
"""

from __future__ import annotations

from itertools import takewhile
from typing import Any

import pytest

from qlsched.core.control import (
    AlreadyPaused,
    NotPaused,
    Paused,
    PauseOutcome,
    Resumed,
    ResumeOutcome,
    TriggerRef,
    UnknownTrigger,
)
from qlsched.core.cron import iter_after, parse_cron
from qlsched.core.keys import idempotency_key
from qlsched.core.outcomes import Admitted, FenceLost
from qlsched.core.pause import CatchUp
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres.control import pause, read_action_totals, read_controls, resume
from qlsched.postgres.pool import Connection
from tests.integration.adapter_support import (
    LEASE_MS,
    MINUTE_MS,
    Env,
    fire_for,
    one_project,
    run_round,
    trigger,
)

HOUR_MS = 60 * MINUTE_MS


async def do_pause(
    env: Env, ref: str = "p/t0000", note: str | None = None, actor: str | None = None
) -> PauseOutcome:
    project, _, trigger_id = ref.partition("/")

    async def fn(conn: Connection) -> PauseOutcome:
        return await pause(conn, TriggerRef(project, trigger_id), note=note, actor=actor)

    return await env.admin(fn)


async def do_resume(
    env: Env, ref: str = "p/t0000", catch_up: CatchUp = "skip", actor: str | None = None
) -> ResumeOutcome:
    project, _, trigger_id = ref.partition("/")

    async def fn(conn: Connection) -> ResumeOutcome:
        return await resume(conn, TriggerRef(project, trigger_id), catch_up=catch_up, actor=actor)

    return await env.admin(fn)


def occurrences(cron: str, first_ms: int, until_ms: int) -> list[int]:
    """Occurrences in ``[first_ms, until_ms]``, stepped one by one (the independent count)."""
    schedule = parse_cron(cron)
    return list(takewhile(lambda t: t <= until_ms, iter_after(schedule, first_ms - 1)))


async def actions(env: Env) -> list[dict[str, Any]]:
    rows = await env.su("SELECT * FROM qlsched.schedule_actions ORDER BY action_id")
    return [dict(r) for r in rows]


async def test_a_paused_row_is_not_claimed_while_another_is(env: Env) -> None:
    """Rule: a paused trigger is not claimable: a real claim round over two due triggers
    claims only the running one, and the paused row keeps its revision and cursor."""
    await env.publish(one_project(2))
    cursor = await env.make_due()
    before = await env.schedule("p", "t0000")
    outcome = await do_pause(env, note="disk full")
    assert isinstance(outcome, Paused)

    claims = await env.store.claim("A", 16, LEASE_MS)

    assert [c.trigger_id for c in claims] == ["t0001"]
    row = await env.schedule("p", "t0000")
    assert (row["active"], row["trigger_revision"], row["next_fire_at_ms"]) == (
        False,
        before["trigger_revision"],
        cursor,
    )
    assert (row["paused_at_ms"], row["pause_note"]) == (outcome.paused_at_ms, "disk full")


async def test_pausing_voids_a_claim_taken_before_it(env: Env) -> None:
    """Rule: a pause committed while a replica holds a claim on the row makes that claim's
    admit fail its fence: no Run is admitted after the pause."""
    await env.publish(one_project(1))
    await env.make_due()
    [claim] = await env.store.claim("A", 16, LEASE_MS)
    fire = fire_for(claim)
    await do_pause(env)

    [outcome] = await env.store.admit([fire])

    assert isinstance(outcome, FenceLost), outcome
    assert (await env.counts()).runs == 0


async def test_republishing_keeps_a_trigger_paused(env: Env) -> None:
    """Rule: pause state is not part of the spec: re-publishing the same file changes
    nothing (no new revision, still paused, cursor kept); a changed trigger gets its new
    revision with the usual reset (cursor cleared, versions up) and stays paused; archiving
    and restoring the project leaves it inactive; none of it is claimable."""
    spec = one_project(1)
    await env.publish(spec)
    cursor = await env.make_due()
    await do_pause(env)
    paused = await env.schedule("p", "t0000")

    same = await env.publish(spec)
    assert same.triggers == {"p/t0000": "unchanged"}
    row = await env.schedule("p", "t0000")
    assert (row["xmin"], row["next_fire_at_ms"]) == (paused["xmin"], cursor)

    changed = await env.publish(one_project(1, cron="*/2 * * * *"))
    assert changed.triggers == {"p/t0000": "changed"}
    row = await env.schedule("p", "t0000")
    assert row["trigger_revision"] == paused["trigger_revision"] + 1
    assert row["next_fire_at_ms"] is None
    assert row["state_version"] == paused["state_version"] + 1
    assert row["claim_version"] == paused["claim_version"] + 1
    assert (row["paused_at_ms"], row["active"]) == (paused["paused_at_ms"], False)

    await env.publish(one_project(1, cron="*/2 * * * *", archived=True))
    await env.publish(one_project(1, cron="*/2 * * * *"))
    row = await env.schedule("p", "t0000")
    assert (row["paused_at_ms"], row["active"]) == (paused["paused_at_ms"], False)
    assert await env.store.claim("A", 16, LEASE_MS) == []


@pytest.mark.parametrize(
    ("cron", "back_ms", "period_ms"),
    [
        pytest.param("* * * * *", 90 * MINUTE_MS, MINUTE_MS, id="every-minute-90min"),
        pytest.param("* * * * * *", HOUR_MS, 1000, id="every-second-1h"),
        pytest.param("0 * * * *", 5 * HOUR_MS, HOUR_MS, id="hourly-5h"),
    ],
)
async def test_resume_counts_exactly_the_occurrences_inside_the_pause(
    env: Env, cron: str, back_ms: int, period_ms: int
) -> None:
    """Rule: resume (catch-up skip) counts every occurrence from the cursor at the pause to
    the database time of the resume into paused_total, runs none of them (a round after the
    resume admits nothing at or before that time), and sets the cursor to the first
    occurrence after that time."""
    await env.publish(one_project(1, cron=cron))
    await do_pause(env)
    now = await env.now_ms()
    cursor = next(iter_after(parse_cron(cron), now - back_ms))
    await env.set_cursor("p", "t0000", cursor)

    outcome = await do_resume(env)

    assert isinstance(outcome, Resumed), outcome
    inside = occurrences(cron, cursor, outcome.resumed_at_ms)
    assert (outcome.inside, outcome.paused) == (len(inside), len(inside))
    assert back_ms // period_ms - 1 <= len(inside) <= back_ms // period_ms + 1
    row = await env.schedule("p", "t0000")
    assert row["paused_total"] == len(inside)
    assert row["next_fire_at_ms"] == next(iter_after(parse_cron(cron), outcome.resumed_at_ms))
    assert (row["paused_at_ms"], row["pause_note"], row["active"]) == (None, None, True)
    await run_round(env.store, "A", 16, LEASE_MS)
    # None of the occurrences inside the pause runs. A per-second cron's first occurrence
    # after the resume may already be due when the round runs; it is no pause occurrence.
    runs = await env.su("SELECT scheduled_for_ms FROM qlsched.runs")
    assert [r for r in runs if r["scheduled_for_ms"] <= outcome.resumed_at_ms] == []
    assert all(r["scheduled_for_ms"] >= row["next_fire_at_ms"] for r in runs)


async def test_resume_without_a_cursor_counts_from_the_pause(env: Env) -> None:
    """Rule: a revision never initialised before its pause (no cursor) counts the
    occurrences strictly after the later of the pause and its publish, up to the resume."""
    await env.publish(one_project(1))
    await do_pause(env)
    now = await env.now_ms()
    paused_at = now - 30 * MINUTE_MS
    await env.su_exec("UPDATE qlsched.trigger_schedules SET paused_at_ms = $1", paused_at)
    await env.su_exec("UPDATE qlsched.triggers SET updated_at_ms = $1", paused_at - HOUR_MS)

    outcome = await do_resume(env)

    assert isinstance(outcome, Resumed)
    inside = occurrences("* * * * *", paused_at + 1, outcome.resumed_at_ms)
    assert outcome.inside == len(inside) in (30, 31)
    assert (await env.schedule("p", "t0000"))["paused_total"] == len(inside)


async def test_fire_once_admits_the_latest_occurrence_once_past_its_grace(env: Env) -> None:
    """Rule: resume --catch-up fire_once fires the latest occurrence inside the pause
    exactly once, under that occurrence's cron key, even for a `skip` trigger with no grace
    (it is always late by the time a round claims it); the others are counted, and the
    rounds after it admit nothing more."""
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[TaskEntry(project="p", id="task", command="true")],
            triggers=[trigger("p", "t0000", misfire="skip", misfire_grace_ms=0)],
        )
    )
    await do_pause(env)
    now = await env.now_ms()
    cursor = next(iter_after(parse_cron("* * * * *"), now - HOUR_MS))
    await env.set_cursor("p", "t0000", cursor)

    outcome = await do_resume(env, catch_up="fire_once")

    assert isinstance(outcome, Resumed)
    inside = occurrences("* * * * *", cursor, outcome.resumed_at_ms)
    assert outcome.fires_at_ms == inside[-1] == outcome.next_fire_at_ms
    assert (outcome.inside, outcome.paused) == (len(inside), len(inside) - 1)
    first = await run_round(env.store, "A", 16, LEASE_MS)
    assert [type(o) for o in first.outcomes] == [Admitted], first.outcomes
    await run_round(env.store, "B", 16, LEASE_MS)
    await env.expire_claim("p", "t0000")
    await run_round(env.store, "C", 16, LEASE_MS)
    runs = await env.su("SELECT idempotency_key, scheduled_for_ms FROM qlsched.runs")
    revision = (await env.schedule("p", "t0000"))["trigger_revision"]
    assert [tuple(r) for r in runs] == [
        (idempotency_key("t0000", revision, inside[-1]), inside[-1])
    ]
    row = await env.schedule("p", "t0000")
    assert (row["paused_total"], row["skipped_total"]) == (len(inside) - 1, 0)
    assert row["next_fire_at_ms"] > outcome.resumed_at_ms


async def test_repeated_actions_are_no_ops_that_say_so(env: Env) -> None:
    """Rule: pausing a paused trigger and resuming a running one change nothing and record
    no action; the outcome says which."""
    await env.publish(one_project(1))
    assert isinstance(await do_resume(env), NotPaused)
    first = await do_pause(env, note="first")
    row = await env.schedule("p", "t0000")
    again = await do_pause(env, note="second")
    assert again == AlreadyPaused("p", "t0000", first.paused_at_ms, "first")  # type: ignore[union-attr]
    assert (await env.schedule("p", "t0000"))["xmin"] == row["xmin"]
    assert isinstance(await do_resume(env), Resumed)
    assert isinstance(await do_resume(env), NotPaused)
    assert [a["kind"] for a in await actions(env)] == ["pause", "resume"]


async def test_each_action_is_one_audit_row_with_its_totals(env: Env) -> None:
    """Rule: every pause and resume appends one schedule_actions row in its transaction
    (kind, note, the login role, the --actor label, database time, occurrences counted) and
    counts it in its kind's totals; status reads the latest actions newest first."""
    await env.publish(one_project(1))
    p = await do_pause(env, note="deploy", actor="alice")
    now = await env.now_ms()
    await env.set_cursor("p", "t0000", next(iter_after(parse_cron("* * * * *"), now - HOUR_MS)))
    r = await do_resume(env, actor="bob")
    assert isinstance(p, Paused)
    assert isinstance(r, Resumed)

    rows = await actions(env)
    assert [
        (a["kind"], a["note"], a["actor"], a["actor_label"], a["occurrences"]) for a in rows
    ] == [
        ("pause", "deploy", "qlsched_admin", "alice", 0),
        ("resume", None, "qlsched_admin", "bob", r.paused),
    ]
    assert [a["action_id"] for a in rows] == [p.action_id, r.action_id]
    assert rows[0]["at_ms"] >= p.paused_at_ms
    assert rows[1]["at_ms"] >= r.resumed_at_ms

    async def fn(conn: Connection) -> Any:
        return await read_controls(conn, [("p", "t0000")]), await read_action_totals(conn)

    controls, totals = await env.runtime(fn)
    assert [a.kind for a in controls[("p", "t0000")].actions] == ["resume", "pause"]
    assert controls[("p", "t0000")].paused_total == r.paused
    assert [(t.kind, t.actions, t.occurrences) for t in totals] == [
        ("pause", 1, 0),
        ("resume", 1, r.paused),
    ]


async def test_an_unknown_trigger_is_refused(env: Env) -> None:
    """Rule: pausing or resuming a trigger that does not exist is UnknownTrigger, and
    nothing is recorded."""
    await env.publish(one_project(1))
    with pytest.raises(UnknownTrigger, match="no trigger p/nope"):
        await do_pause(env, "p/nope")
    with pytest.raises(UnknownTrigger):
        await do_resume(env, "q/t0000")
    assert await actions(env) == []


async def test_resuming_a_trigger_of_an_archived_project_schedules_nothing(env: Env) -> None:
    """Rule: a trigger resumed while its project is archived is no longer paused but stays
    inactive (nothing would have run, so nothing is counted); restoring the project makes
    it claimable again."""
    await env.publish(one_project(1))
    cursor = await env.make_due(age_ms=HOUR_MS)
    await do_pause(env)
    await env.publish(one_project(1, archived=True))

    outcome = await do_resume(env)

    assert isinstance(outcome, Resumed)
    assert (outcome.scheduled, outcome.inside, outcome.paused) == (False, 0, 0)
    row = await env.schedule("p", "t0000")
    assert (row["paused_at_ms"], row["active"], row["paused_total"]) == (None, False, 0)
    assert row["next_fire_at_ms"] == cursor
    await env.publish(one_project(1))
    assert [c.trigger_id for c in await env.store.claim("A", 16, LEASE_MS)] == ["t0000"]
