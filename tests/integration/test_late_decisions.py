"""A long outage does not make the cluster livelock (issue #14, hole 3): a round of triggers
a year late decides and admits in one round, with the exact passed-over count. Its speed is
measured by ``qlsched bench`` (the costs phase's ``decision_round`` line), not asserted
here."""

from __future__ import annotations

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from tests.integration.adapter_support import Env, trigger, trigger_ids

YEAR_MS = 365 * 86_400_000
TRIGGERS = 16


async def test_every_second_triggers_a_year_late_are_admitted_in_one_round(env: Env) -> None:
    """Rule: 16 ``fire_once`` every-second triggers in Europe/Berlin, a year late (31.5
    million passed-over occurrences each), are admitted by the first round of a replica with
    the default lease and budget; each Run is the cursor's occurrence, and each row's
    ``coalesced_total`` is exactly the seconds between the cursor and the new cursor, so
    nothing is lost silently. (How fast such a round decides is the bench's
    ``decision_round`` line, a ratio to the lease: no wall-clock bound here.)"""
    ids = trigger_ids(TRIGGERS)
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[TaskEntry(project="p", id="task", command="true")],
            triggers=[
                trigger("p", t, cron="* * * * * *", misfire="fire_once", timezone="Europe/Berlin")
                for t in ids
            ],
        )
    )
    now = await env.now_ms()
    cursor = (now - YEAR_MS) // 1000 * 1000
    await env.su_exec("UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $1", cursor)
    config = Config(owner="r1")
    coordinator = Coordinator(env.store, config, env.sink, Metrics())

    stats = await coordinator.run_round()

    assert (stats.claimed, stats.admitted) == (TRIGGERS, TRIGGERS), stats
    rows = await env.su(
        "SELECT s.trigger_id, s.next_fire_at_ms, s.coalesced_total, r.scheduled_for_ms"
        " FROM qlsched.trigger_schedules AS s JOIN qlsched.runs AS r USING (trigger_id)"
    )
    assert len(rows) == TRIGGERS
    for row in rows:
        assert row["scheduled_for_ms"] == cursor
        # every second in (cursor, next cursor) was passed over: counted, not admitted
        assert row["coalesced_total"] == (row["next_fire_at_ms"] - cursor) // 1000 - 1
        assert row["coalesced_total"] >= YEAR_MS // 1000
    assert stats.coalesced == sum(r["coalesced_total"] for r in rows)
