"""Jitter on PostgreSQL (docs/contract.md §10): the database's hash is the core's, the due
time follows every cursor write, a jittered occurrence is claimed at its due time and not
before, by whichever replica, and admitted once under its scheduled time's key.

Due times are chosen, not waited for long: ``h`` is a pure function of (project, trigger,
revision, S), so a test picks the cursor S whose due time S + h lands a few seconds after
the database's now, then waits on the database clock.
"""

from __future__ import annotations

import random

import pytest
import trio

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.keys import fire_request, idempotency_key
from qlsched.core.outcomes import Admitted, Fire
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from tests.integration.adapter_support import LEASE_MS, Env, decision_for, trigger

HOURLY = "0 * * * *"
JITTER_MS = 3_000_000


def jittered(jitter_ms: int = JITTER_MS, *ids: str) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="task", command="true")],
        triggers=[trigger("p", t, cron=HOURLY, jitter_ms=jitter_ms) for t in ids or ("j",)],
    )


def cursor_due_in(now_ms: int, lo_ms: int, hi_ms: int, trigger_id: str = "j") -> int:
    """A cursor S at or before ``now_ms`` whose due time S + h (revision 1) falls in
    ``[now + lo, now + hi]``: past its scheduled time, not yet due."""
    for s in range(now_ms, now_ms - JITTER_MS, -7):
        due = s + jitter_offset_ms("p", trigger_id, 1, s, JITTER_MS)
        if now_ms + lo_ms <= due <= now_ms + hi_ms:
            return s
    raise AssertionError("no such cursor")


async def test_the_databases_hash_is_the_cores(env: Env) -> None:
    """Rule: ``qlsched.jitter_offset_ms`` (the generated due time's hash) equals
    ``core.jitter.jitter_offset_ms`` for every input: ids of every allowed character and
    length, revisions, negative and large times, every jitter bound up to an hour."""
    rng = random.Random(18)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_.-"
    rows = [
        (
            rng.choice("a0") + "".join(rng.choices(alphabet, k=rng.randint(0, 62))),
            rng.choice("z9") + "".join(rng.choices(alphabet, k=rng.randint(0, 62))),
            rng.randint(1, 2**40),
            rng.randint(-(2**41), 2**45),
            rng.choice([1, 2, 999, 1000, 59_999, 3_599_999, 3_600_000, rng.randint(1, 3_600_000)]),
        )
        for _ in range(3000)
    ]
    got = await env.su(
        "SELECT qlsched.jitter_offset_ms(p, t, r, s, j) AS h"
        " FROM ROWS FROM (unnest($1::text[]), unnest($2::text[]), unnest($3::bigint[]),"
        " unnest($4::bigint[]), unnest($5::bigint[])) WITH ORDINALITY AS f(p, t, r, s, j, n)"
        " ORDER BY n",
        *[list(column) for column in zip(*rows, strict=True)],
    )
    assert [r["h"] for r in got] == [jitter_offset_ms(*row) for row in rows]


async def test_the_due_time_follows_every_cursor_write(env: Env) -> None:
    """Rule: ``due_at_ms`` is the cursor plus h of the row's revision and jitter, whoever
    writes the cursor (a direct write, the runtime's admit); NULL with a NULL cursor; the
    cursor itself without jitter. Publish pins the revision's jitter on the schedule row."""
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[TaskEntry(project="p", id="task", command="true")],
            triggers=[
                trigger("p", "j", cron=HOURLY, jitter_ms=JITTER_MS),
                trigger("p", "plain", cron=HOURLY),
            ],
        )
    )
    rows = await env.schedules()
    assert {t: (r["jitter_ms"], r["due_at_ms"]) for t, r in rows.items()} == {
        "j": (JITTER_MS, None),
        "plain": (0, None),
    }
    now = await env.now_ms()
    await env.set_cursor("p", "j", now - JITTER_MS)
    await env.set_cursor("p", "plain", now - 1000)
    rows = await env.schedules()
    h = jitter_offset_ms("p", "j", 1, now - JITTER_MS, JITTER_MS)
    assert rows["j"]["due_at_ms"] == now - JITTER_MS + h
    assert rows["plain"]["due_at_ms"] == now - 1000

    claims = await env.store.claim("r1", 2, LEASE_MS)
    fires = [fire_request(c, d) for c in claims if isinstance(d := decision_for(c), Fire)]
    outcomes = await env.store.admit(fires)
    assert all(isinstance(o, Admitted) for o in outcomes), outcomes
    rows = await env.schedules()
    nxt = rows["j"]["next_fire_at_ms"]
    assert rows["j"]["due_at_ms"] == nxt + jitter_offset_ms("p", "j", 1, nxt, JITTER_MS)
    assert rows["plain"]["due_at_ms"] == rows["plain"]["next_fire_at_ms"]


async def test_a_jittered_occurrence_is_claimed_at_its_due_time_not_before(env: Env) -> None:
    """Rule: an occurrence scheduled for S is not claimable before S + h and is claimable
    from S + h; the Run it becomes carries ``scheduled_for`` S and S's key, admitted at or
    after S + h, with the Fire's offset h."""
    await env.publish(jittered())
    now = await env.now_ms()
    s = cursor_due_in(now, 1500, 2500)
    h = jitter_offset_ms("p", "j", 1, s, JITTER_MS)
    await env.set_cursor("p", "j", s)

    assert await env.store.claim("r1", 1, LEASE_MS) == []
    await env.wait_db_time(s + h)
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    assert claim.claimed_at_ms >= s + h
    decision = decision_for(claim)
    assert isinstance(decision, Fire), decision
    assert (decision.scheduled_for_ms, decision.jitter_offset_ms) == (s, h)
    [outcome] = await env.store.admit([fire_request(claim, decision)])
    assert isinstance(outcome, Admitted), outcome
    assert outcome.admitted_at_ms >= s + h
    [run] = await env.su("SELECT scheduled_for_ms, idempotency_key FROM qlsched.runs")
    assert (run["scheduled_for_ms"], run["idempotency_key"]) == (s, idempotency_key("j", 1, s))


async def test_two_replicas_admit_a_jittered_occurrence_once_at_its_due_time(env: Env) -> None:
    """Rule: two replicas (two coordinators, owners r1 and r2, taking rounds in turn) see
    the same due time: neither admits before S + h, and the occurrence becomes exactly one
    Run; a takeover after a claim expired decides the same occurrence with the same h."""
    await env.publish(jittered(JITTER_MS, "j", "k"))
    now = await env.now_ms()
    s = cursor_due_in(now, 1500, 2500)
    h = jitter_offset_ms("p", "j", 1, s, JITTER_MS)
    await env.set_cursor("p", "j", s)
    replicas = [
        Coordinator(env.store, Config(owner=owner), env.sink, Metrics()) for owner in ("r1", "r2")
    ]
    # Trigger k: r1 claims it and dies (its claim expires); r2 takes over.
    sk = cursor_due_in(now, -60_000, -1000, "k")
    await env.set_cursor("p", "k", sk)
    [dead] = await env.store.claim("r1", 1, LEASE_MS)
    assert dead.trigger_id == "k"
    first = decision_for(dead)
    await env.expire_claim("p", "k")

    admitted_at: list[int] = []
    turn = 0
    with trio.fail_after(10):
        while not admitted_at:
            await replicas[turn % 2].run_round()
            turn += 1
            runs = await env.su(
                "SELECT scheduled_for_ms, created_at_ms FROM qlsched.runs WHERE trigger_id = 'j'"
            )
            assert [r["scheduled_for_ms"] for r in runs] in ([], [s])
            admitted_at = [r["created_at_ms"] for r in runs]
            await trio.sleep(0.05)
    assert admitted_at, "never admitted"
    assert min(admitted_at) >= s + h
    for replica in replicas:  # later rounds of either replica admit it no more
        await replica.run_round()
    runs = await env.su("SELECT trigger_id, scheduled_for_ms FROM qlsched.runs ORDER BY 1")
    assert [(r["trigger_id"], r["scheduled_for_ms"]) for r in runs] == [("j", s), ("k", sk)]
    assert isinstance(first, Fire)
    hk = jitter_offset_ms("p", "k", 1, sk, JITTER_MS)
    assert first.jitter_offset_ms == hk
    # Each replica measured its Runs' lag from the due time and from the scheduled time.
    sums = [
        sum(
            r.metrics.registry.get_sample_value(
                f"qlsched_schedule_lag{series}_seconds_sum", {"profile": "cluster"}
            )
            or 0
            for r in replicas
        )
        for series in ("", "_from_scheduled")
    ]
    assert sums[1] - sums[0] == pytest.approx((h + hk) / 1000, abs=0.002)


async def test_republishing_the_jitter_is_a_new_revision_with_its_jitter_pinned(
    env: Env,
) -> None:
    """Rule: ``jitter_ms`` is part of the revision: a changed jitter is a new revision
    (cursor and due time cleared, the new jitter on the schedule row and in the claim);
    publishing the same file again changes nothing; prune and re-pin keep the jitter."""
    await env.publish(jittered(1000))
    changed = await env.publish(jittered(2000))
    assert changed.triggers == {"p/j": "changed"}
    row = await env.schedule("p", "j")
    assert (row["trigger_revision"], row["jitter_ms"], row["due_at_ms"]) == (2, 2000, None)
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    assert (claim.trigger_revision, claim.jitter_ms) == (2, 2000)
    again = await env.publish(jittered(2000))
    assert again.triggers == {"p/j": "unchanged"}
    repinned = await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[TaskEntry(project="p", id="task", command="false")],
        )
    )
    assert repinned.triggers == {"p/j": "repinned"}
    rows = await env.su(
        "SELECT t.jitter_ms, s.jitter_ms AS pinned FROM qlsched.triggers AS t"
        " JOIN qlsched.trigger_schedules AS s USING (project_id, trigger_id)"
    )
    assert [tuple(r) for r in rows] == [(2000, 2000)]
