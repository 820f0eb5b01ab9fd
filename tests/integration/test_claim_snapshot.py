"""The claim never mixes row versions: the spec it returns is the revision of the row it
locked (issue #14, hole 1; the class: a READ COMMITTED statement whose row lock follows the
update chain while its joins still read the statement's snapshot).

The window is the time between the claim statement's snapshot and its lock on a row. The
test widens it without touching the statement: another session holds row locks on many rows
that come first in the claim index, so the claim walks past them (SKIP LOCKED) before it
reaches the target row; a publish that changes the target's cron commits meanwhile.
"""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from qlsched.core.fence import Claim
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres.pool import open_database
from qlsched.postgres.store import CLAIM_SETTINGS, PostgresStore
from tests.integration.adapter_support import Env, trigger

pytestmark = pytest.mark.slow

YEARLY = "0 0 1 1 *"
EVERY_MINUTE = "* * * * *"
FILLER_ROWS = 100_000


def spec(cron: str) -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="task", command="true")],
        triggers=[trigger("p", "target", cron=cron), trigger("p", "seed")],
    )


async def add_filler(env: Env) -> None:
    """``FILLER_ROWS`` active, due triggers ordered before every real row, even one whose
    cursor is NULL (the claim orders by ``COALESCE(next_fire_at_ms, -1)``)."""
    await env.su_exec(
        "INSERT INTO qlsched.triggers SELECT t.project_id, 'f' || g, t.revision, t.kind,"
        " t.enabled, t.cron, t.timezone, t.misfire_policy, t.misfire_grace_ms, t.task_id,"
        " t.task_revision, t.execution_revision_id, t.content_digest, t.created_at_ms,"
        " t.updated_at_ms FROM qlsched.triggers AS t, generate_series(1, $1) AS g"
        " WHERE t.trigger_id = 'seed'",
        FILLER_ROWS,
    )
    await env.su_exec(
        "INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision,"
        " active, next_fire_at_ms, updated_at_ms)"
        " SELECT 'p', 'f' || g, 1, true, -1000, 0 FROM generate_series(1, $1) AS g",
        FILLER_ROWS,
    )
    await env.su_exec("ANALYZE qlsched.trigger_schedules")


HOLD_COMMIT = 4242
"""Advisory lock a test-installed deferred trigger waits on at the publisher's COMMIT."""


async def hold_publish_commits(env: Env) -> None:
    """Make every publish wait, at COMMIT, for advisory lock ``HOLD_COMMIT``: a deferred
    constraint trigger on the triggers table (test scaffolding; the product has none)."""
    await env.su_exec(
        "CREATE FUNCTION public.hold_commit() RETURNS trigger LANGUAGE plpgsql"
        f" AS $$ BEGIN PERFORM pg_catalog.pg_advisory_xact_lock({HOLD_COMMIT}); RETURN NULL;"
        " END $$"
    )
    await env.su_exec(
        "CREATE CONSTRAINT TRIGGER hold_commit AFTER UPDATE ON qlsched.triggers"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.hold_commit()"
    )


async def wait_active(env: Env, user: str, wait: str | None) -> None:
    """Poll until a backend of ``user`` runs a statement that has taken its snapshot
    (``backend_xmin`` set), waiting on ``wait`` if given."""
    with trio.fail_after(20):
        while not await env.su_val(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity"
            " WHERE datname = current_database() AND usename = $1 AND state = 'active'"
            " AND backend_xmin IS NOT NULL AND ($2::text IS NULL OR wait_event = $2)",
            user,
            wait,
        ):
            await trio.lowlevel.checkpoint()


async def claim_while_republishing(env: Env, store: PostgresStore, cron: str) -> list[Claim]:
    """One claim statement whose snapshot sees the target before a publish of ``cron``
    that commits while the claim walks past the locked filler rows."""
    holder = await env.connect()
    await holder.execute("BEGIN")
    await holder.execute(
        "SELECT 1 FROM qlsched.trigger_schedules WHERE trigger_id LIKE 'f%' FOR UPDATE"
    )
    gate = await env.connect()
    await gate.execute(f"SELECT pg_catalog.pg_advisory_lock({HOLD_COMMIT})")
    claims: list[Claim] = []

    async def claim() -> None:
        claims.extend(await store.claim("r1", 16, 30_000))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(env.publish, spec(cron))
            await wait_active(env, "qlsched_admin", "advisory")
            nursery.start_soon(claim)
            await wait_active(env, "qlsched_runtime", None)
            await gate.execute(f"SELECT pg_catalog.pg_advisory_unlock({HOLD_COMMIT})")
    finally:
        await holder.execute("ROLLBACK")
    return claims


async def test_a_republish_between_snapshot_and_lock_never_hands_back_the_old_spec(
    env: Env,
) -> None:
    """Rule: a claim returns a row only with the spec of the revision that row holds. A
    publish that changes the cron and commits after the claim's snapshot but before its row
    lock leaves the row (now the new revision, cursor cleared) unclaimed by that statement,
    never handed back with the old spec (which would initialise the new revision from the
    old cron: a yearly cursor for an every-minute trigger, a month of occurrences lost)."""
    await env.publish(spec(YEARLY))
    await add_filler(env)
    await hold_publish_commits(env)
    # One claim connection with the statement already prepared, so the snapshot the test
    # waits for is the execution's, not the one a first Parse takes.
    async with open_database(env.db.runtime_dsn, max_size=1, settings=CLAIM_SETTINGS) as db:
        store = PostgresStore(db, db)
        await store.claim("warm-up", 1, 30_000)
        await race_both_ways(env, store)


async def race_both_ways(env: Env, store: PostgresStore) -> None:
    for cron in (EVERY_MINUTE, YEARLY):
        await env.su_exec(
            "UPDATE qlsched.trigger_schedules SET claim_owner = NULL, claim_token = NULL,"
            " claim_expires_at_ms = NULL WHERE trigger_id IN ('target', 'seed')"
        )
        claims = await claim_while_republishing(env, store, cron)
        for c in claims:
            stored = await env.su(
                "SELECT cron, content_digest FROM qlsched.triggers"
                " WHERE trigger_id = $1 AND revision = $2",
                c.trigger_id,
                c.trigger_revision,
            )
            assert [(c.cron, c.trigger_digest)] == [tuple(r) for r in stored], (
                f"{c.trigger_id} at revision {c.trigger_revision} was claimed with the spec"
                f" {c.cron!r} of another revision"
            )
        assert [c.trigger_id for c in claims] == ["seed"]
        # Left unclaimed at its new revision, for the next claim to take with its own spec.
        row = await env.schedule("p", "target")
        assert (row["claim_token"], row["next_fire_at_ms"]) == (None, None)
        assert row["trigger_revision"] == await env.su_val(
            "SELECT revision FROM qlsched.triggers WHERE trigger_id = 'target'"
        )
