"""A resume never mixes row versions: the spec it plans with is the revision of the row it
locked (the class of issue #14's hole 1, a READ COMMITTED statement whose row lock follows
the update chain while its joins still read the statement's snapshot).

The window is a publish that has re-pinned the paused row (holding its lock) and waits at
COMMIT: the resume's statement takes its snapshot, waits on the row, and, once the publish
commits, locks the new row version. Whatever it plans with must be that version's trigger.
"""

from __future__ import annotations

import trio

from qlsched.core.control import Resumed, ResumeOutcome, TriggerRef
from qlsched.postgres.control import pause, resume
from qlsched.postgres.pool import open_database
from tests.integration.adapter_support import Env, one_project
from tests.integration.test_claim_snapshot import HOLD_COMMIT, hold_publish_commits, wait_active
from tests.support.pg import TestDatabase

OLD_CRON = "* * * * *"
NEW_CRON = "0 0 1 1 *"
REF = TriggerRef("p", "t0000")


async def test_a_resume_waiting_on_a_publish_plans_with_the_revision_it_locked(
    env: Env, pg_db: TestDatabase
) -> None:
    """Rule: a resume that locks the row a concurrent publish re-pinned (new revision, no
    cursor) plans with that revision's trigger, never the old trigger row its statement's
    snapshot still saw: it reports the trigger scheduled (it is: the row is active again),
    counts from the new revision's publish and leaves the cursor to the replica's
    initialisation, since no occurrence of the new cron fell inside. Mixing versions made it
    say "schedules nothing" of a trigger it had just made active."""
    await env.publish(one_project(1, cron=OLD_CRON))
    await env.admin(lambda conn: pause(conn, REF, note=None, actor=None))
    await hold_publish_commits(env)
    gate = await env.connect()
    await gate.execute(f"SELECT pg_catalog.pg_advisory_lock({HOLD_COMMIT})")
    outcome: list[ResumeOutcome] = []

    async with open_database(pg_db.admin_dsn, max_size=1) as resumer:

        async def do_resume() -> None:
            outcome.append(
                await resumer.run(lambda conn: resume(conn, REF, catch_up="skip", actor=None))
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(env.publish, one_project(1, cron=NEW_CRON))
            await wait_active(env, "qlsched_admin", "advisory")
            nursery.start_soon(do_resume)
            await wait_active(env, "qlsched_admin", "transactionid")
            await gate.execute(f"SELECT pg_catalog.pg_advisory_unlock({HOLD_COMMIT})")

    row = await env.schedule("p", "t0000")
    (resumed,) = outcome
    assert isinstance(resumed, Resumed)
    assert (row["trigger_revision"], row["active"], row["paused_at_ms"]) == (2, True, None)
    assert resumed.scheduled
    assert (resumed.inside, resumed.paused, resumed.next_fire_at_ms) == (0, 0, None)
    assert row["next_fire_at_ms"] is None
    (action,) = await env.su(
        "SELECT trigger_revision FROM qlsched.schedule_actions WHERE kind = 'resume'"
    )
    assert action["trigger_revision"] == 2
