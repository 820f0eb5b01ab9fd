"""The admit statement on PostgreSQL: the fence race, revisions, fail-closed digests,
atomicity, batch fallback and SERIALIZABLE under concurrency (docs/contract.md §5 "Admit",
"Batch admission", "Fail closed").

"Writes nothing" is checked the PostgreSQL way: the schedule row's ``xmin`` is unchanged (a
row rewritten even to the same values gets a new one) and no Run, Attempt or event exists.
"One transaction" is checked the same way: the Run, its Attempt, both events and the
advanced schedule row carry one ``xmin``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
import trio

from qlsched.core.fence import Claim, FireRequest
from qlsched.core.keys import fire_request
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    DigestInvalid,
    FenceLost,
    Fire,
    Inactive,
    Outcome,
    RetryExhausted,
    RevisionChanged,
    Skip,
    Skipped,
    StoreFailed,
)
from qlsched.postgres.admit_rows import MixedOwners
from qlsched.postgres.pool import open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.store import ADMIT_SETTINGS, PostgresStore
from tests.integration.adapter_support import (
    LEASE_MS,
    Counts,
    Env,
    decision_for,
    fire_for,
    one_project,
    restale,
    run_round,
    trigger,
)

NOTHING = Counts(runs=0, attempts=0, events=0)


async def due_claim(env: Env, *, command: str = "true", lease_ms: int = LEASE_MS) -> Claim:
    """One published trigger p/t0000, due 1 s ago, claimed by r1."""
    await env.publish(one_project(1, command=command))
    await env.make_due()
    [claim] = await env.store.claim("r1", 1, lease_ms)
    return claim


async def hold_row_lock(env: Env, trigger_id: str = "t0000") -> Any:
    """A superuser transaction holding ``FOR UPDATE`` on p/<trigger_id>'s schedule row."""
    holder = await env.connect()
    await holder.execute("BEGIN")
    await holder.fetch(
        "SELECT 1 FROM qlsched.trigger_schedules"
        " WHERE project_id = 'p' AND trigger_id = $1 FOR UPDATE",
        trigger_id,
    )
    return holder


# --- one occurrence --------------------------------------------------------------------------


async def test_admit_is_one_transaction_of_run_attempt_events_and_cursor(env: Env) -> None:
    """An admitted Fire is one transaction: the queued Run (with the fence it was admitted
    under and its pins), the pristine claimed remote_worker Attempt, ``run.created`` then
    ``run.queued``, and the advanced, unclaimed schedule row all carry the same xmin and the
    same database time."""
    claim = await due_claim(env)
    fire = fire_for(claim)

    [outcome] = await env.store.admit([fire])

    assert isinstance(outcome, Admitted)
    at = outcome.admitted_at_ms
    [run] = await env.su("SELECT xmin::text AS xmin, * FROM qlsched.runs")
    [attempt] = await env.su("SELECT xmin::text AS xmin, * FROM qlsched.attempts")
    events = await env.su("SELECT xmin::text AS xmin, * FROM qlsched.run_events ORDER BY seq")
    row = await env.schedule("p", "t0000")
    assert {run["xmin"], attempt["xmin"], row["xmin"], *(e["xmin"] for e in events)} == {
        run["xmin"]
    }
    assert (run["run_id"], run["state"], run["owner"]) == (fire.run_id, "queued", "runtime")
    assert (run["scheduled_for_ms"], run["idempotency_key"]) == (
        claim.cursor_ms,
        fire.idempotency_key,
    )
    assert (run["queued_at_ms"], run["created_at_ms"], run["cancel_requested"]) == (at, at, False)
    assert (run["task_id"], run["task_revision"], run["execution_revision_id"]) == (
        claim.task_id,
        claim.task_revision,
        claim.execution_revision_id,
    )
    assert (
        run["admitted_by_owner"],
        run["admitted_claim_token"],
        run["admitted_claim_version"],
    ) == ("r1", claim.fence.token, claim.fence.version)
    assert (attempt["attempt_id"], attempt["run_id"], attempt["attempt_no"]) == (
        fire.attempt_id,
        fire.run_id,
        1,
    )
    assert (attempt["executor_kind"], attempt["state"], attempt["created_at_ms"]) == (
        "remote_worker",
        "claimed",
        at,
    )
    drift = ("worker_id", "session_id", "lease_id", "offer_id", "callback_token")
    assert all(attempt[f] is None for f in (*drift, "started_at_ms", "result", "error"))
    assert [(e["seq"], e["type"], e["at_ms"], e["actor"]) for e in events] == [
        (1, "run.created", at, "r1"),
        (2, "run.queued", at, "r1"),
    ]
    assert all(e["run_id"] == fire.run_id for e in events)
    assert (row["next_fire_at_ms"], row["last_scheduled_at_ms"]) == (
        fire.next_ms,
        claim.cursor_ms,
    )
    assert (row["claim_owner"], row["claim_token"], row["claim_expires_at_ms"]) == (
        None,
        None,
        None,
    )
    assert row["state_version"] == claim.state_version + 1
    assert row["updated_at_ms"] == at


@pytest.mark.parametrize("part", ["owner", "token", "version"])
async def test_stale_fence_part_is_refused_and_writes_nothing(env: Env, part: str) -> None:
    """A FireRequest whose fence differs from the row in one part (owner, token or version)
    is refused with FenceLost naming that part; the schedule row is not even rewritten and no
    Run, Attempt or event exists. The real claim is untouched by the refusal: its own
    FireRequest is admitted afterwards."""
    claim = await due_claim(env)
    fire = fire_for(claim)
    changes: dict[str, dict[str, Any]] = {
        "owner": {"owner": "r2"},
        "token": {"token": uuid.uuid4()},
        "version": {"version": claim.fence.version - 1},
    }
    stale = restale(fire, **changes[part])
    before = await env.schedule("p", "t0000")

    [outcome] = await env.store.admit([stale])

    assert outcome == FenceLost("p", "t0000", part=part)  # type: ignore[arg-type]
    assert await env.schedule("p", "t0000") == before
    assert await env.counts() == NOTHING
    [ok] = await env.store.admit([fire])
    assert isinstance(ok, Admitted)


async def test_expired_fence_is_refused_by_database_time(env: Env) -> None:
    """Expiry is judged by the database clock alone: once it passes the claim's expiry the
    admit is refused with FenceLost(expiry) even though the request claims an expiry an hour
    ahead (the client's view of expiry is never sent or trusted), and nothing is written."""
    claim = await due_claim(env, lease_ms=1_200)
    fire = restale(fire_for(claim), expires_at_ms=claim.fence.expires_at_ms + 3_600_000)
    await env.wait_db_time(claim.fence.expires_at_ms)
    before = await env.schedule("p", "t0000")

    [outcome] = await env.store.admit([fire])

    assert outcome == FenceLost("p", "t0000", part="expiry")
    assert await env.schedule("p", "t0000") == before
    assert await env.counts() == NOTHING


async def test_revision_published_between_claim_and_admit(env: Env) -> None:
    """A task change published after the claim re-pins the trigger as a new revision: the
    admit is refused with RevisionChanged(trigger) (the revision is checked before anything
    else), writes nothing, and the new revision waits uninitialised for the next claimer."""
    claim = await due_claim(env)
    fire = fire_for(claim)
    await env.publish(one_project(1, command="echo changed"))
    before = await env.schedule("p", "t0000")

    [outcome] = await env.store.admit([fire])

    assert outcome == RevisionChanged("p", "t0000", part="trigger")
    assert await env.counts() == NOTHING
    assert await env.schedule("p", "t0000") == before
    assert before["trigger_revision"] == claim.trigger_revision + 1
    [again] = await env.store.claim("r2", 1, LEASE_MS)
    assert again.cursor_ms is None
    assert again.execution_revision_id != claim.execution_revision_id


async def test_skip_advances_cursor_under_the_fence_and_writes_no_run(env: Env) -> None:
    """A misfire past the grace under policy ``skip`` is a Skip decision: settled under the
    same fence in one statement, it advances the cursor, adds the skipped occurrences to
    ``skipped_total``, clears the claim, leaves ``last_scheduled_at_ms`` alone and writes
    no Run, Attempt or event; a second skip with the same (now dead) claim writes nothing."""
    await env.publish(one_project(1))
    await env.make_due(age_ms=5 * 60_000 + 500)
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    decision = decision_for(claim)
    assert isinstance(decision, Skip)
    assert decision.skipped >= 5

    outcome = await env.store.skip(claim, decision)

    assert outcome == Skipped("p", "t0000", next_ms=decision.next_ms, skipped=decision.skipped)
    row = await env.schedule("p", "t0000")
    assert row["next_fire_at_ms"] == decision.next_ms > claim.claimed_at_ms
    assert row["skipped_total"] == decision.skipped
    assert row["last_scheduled_at_ms"] is None
    assert (row["claim_owner"], row["claim_token"]) == (None, None)
    assert row["state_version"] == claim.state_version + 1
    assert await env.counts() == NOTHING
    again = await env.store.skip(claim, decision)
    assert again == FenceLost("p", "t0000", part="owner")
    assert await env.schedule("p", "t0000") == row


async def test_failed_insert_rolls_back_the_whole_admit(env: Env) -> None:
    """When one insert of the admit fails (here the ``run.queued`` event violates an injected
    CHECK), nothing of the occurrence is written: no Run, no Attempt, no event, the cursor
    untouched; the outcome is a typed StoreFailed carrying the SQLSTATE and exception class
    only. The claim is given back at once under its fence (not left to its lease) with the
    failure counted on the row, so the next claim takes it and admits once the fault is
    gone, which clears the count."""
    claim = await due_claim(env)
    fire = fire_for(claim)
    await env.su_exec(
        "ALTER TABLE qlsched.run_events ADD CONSTRAINT no_queued CHECK (type <> 'run.queued')"
    )
    before = await env.schedule("p", "t0000")

    [outcome] = await env.store.admit([fire])

    assert outcome == StoreFailed("p", "t0000", sqlstate="23514", exception="CheckViolationError")
    assert await env.counts() == NOTHING
    after = await env.schedule("p", "t0000")
    assert after["next_fire_at_ms"] == before["next_fire_at_ms"]
    assert (after["claim_token"], after["failures"], after["last_failure"]) == (
        None,
        1,
        "store_failed:23514",
    )
    assert [(d.code, d.sqlstate) for d in env.sink.items] == [("admit_failed", "23514")]
    await env.su_exec("ALTER TABLE qlsched.run_events DROP CONSTRAINT no_queued")
    [again] = await env.store.claim("r1", 10, LEASE_MS)
    [ok] = await env.store.admit([fire_for(again)])
    assert isinstance(ok, Admitted)
    assert await env.counts() == Counts(runs=1, attempts=1, events=2)
    assert (await env.schedule("p", "t0000"))["failures"] == 0


CORRUPTIONS = {
    # the payload no longer hashes to the stored digest
    "execution": "UPDATE qlsched.execution_revisions SET payload = payload || ' '",
    # the pinned execution revision is for another executor
    "executor": "UPDATE qlsched.execution_revisions SET executor_kind = 'local_shell'",
    # the task's digest no longer matches what its execution revision pins
    "task": "UPDATE qlsched.tasks SET content_digest = repeat('0', 64)",
}


@pytest.mark.parametrize("part", sorted(CORRUPTIONS))
async def test_corrupt_pins_fail_closed(env: Env, part: str) -> None:
    """A pinned execution revision whose payload no longer matches its digest, whose executor
    is not ``remote_worker``, or whose task digest disagrees with it, admits nothing:
    DigestInvalid names the part, no Run/Attempt/event, and the claim is left exactly in
    place to expire (no other replica can take it meanwhile)."""
    claim = await due_claim(env)
    await env.su_exec(CORRUPTIONS[part])
    before = await env.schedule("p", "t0000")

    [outcome] = await env.store.admit([fire_for(claim)])

    assert outcome == DigestInvalid("p", "t0000", part=part)  # type: ignore[arg-type]
    assert await env.counts() == NOTHING
    assert await env.schedule("p", "t0000") == before
    assert before["claim_token"] == claim.fence.token
    assert await env.store.claim("r2", 10, LEASE_MS) == []


async def archive(env: Env) -> None:
    await env.publish(one_project(1, archived=True))


async def disable_by_publish(env: Env) -> None:
    spec = one_project(0)
    await env.publish(
        msgspec.structs.replace(spec, triggers=[trigger("p", "t0000", enabled=False)])
    )


async def disable_in_place(env: Env) -> None:
    await env.su_exec("UPDATE qlsched.triggers SET enabled = false")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # Archiving is a project revision, not a trigger revision: the schedule row and the
        # claim stay, and admit's check of the real project row refuses it.
        (archive, Inactive("p", "t0000", reason="project_archived")),
        # ``enabled`` is part of the trigger's content digest: disabling publishes a new
        # trigger revision (claim cleared, versions bumped), and the revision is the first
        # thing admit checks.
        (disable_by_publish, RevisionChanged("p", "t0000", part="trigger")),
        # A trigger row disabled without a new revision: admit re-verifies ``enabled`` on the
        # real row, not the schedule's cached ``active`` flag.
        (disable_in_place, Inactive("p", "t0000", reason="trigger_disabled")),
    ],
    ids=["archived-project", "disabled-by-publish", "disabled-in-place"],
)
async def test_inactive_between_claim_and_admit(env: Env, change: Any, expected: Outcome) -> None:
    """A project archived or a trigger disabled between claim and admit admits nothing; the
    outcome says which (see the parameters for why each is what it is)."""
    claim = await due_claim(env)
    await change(env)
    before = await env.schedule("p", "t0000")

    [outcome] = await env.store.admit([fire_for(claim)])

    assert outcome == expected
    assert await env.counts() == NOTHING
    assert await env.schedule("p", "t0000") == before


# --- races -----------------------------------------------------------------------------------


@pytest.mark.parametrize("same_request", [True, False], ids=["same-request", "new-run-ids"])
async def test_concurrent_admits_of_one_occurrence(env: Env, same_request: bool) -> None:
    """Two connections admitting the same occurrence at once (released together from a row
    lock): exactly one Run, Attempt and event pair; the loser is refused by the fence
    (FenceLost: the winner cleared the claim) after one serialization retry, never by the
    unique key: no StoreFailed, no RetryExhausted, no 23505 anywhere."""
    claim = await due_claim(env)
    decision = decision_for(claim)
    assert isinstance(decision, Fire)
    mine = fire_request(claim, decision)
    theirs = mine if same_request else fire_request(claim, decision)
    assert theirs.idempotency_key == mine.idempotency_key
    other = await env.open_store(sink=env.sink)
    holder = await hold_row_lock(env)
    outcomes: dict[str, Outcome] = {}

    async def admit(name: str, store: PostgresStore, fire: FireRequest) -> None:
        [outcomes[name]] = await store.admit([fire])

    async with trio.open_nursery() as nursery:
        # Row-lock waiters are served in arrival order: "other" queues first and wins; the
        # claiming store loses and, knowing its lease, retries after the serialization
        # failure and so meets the fence.
        nursery.start_soon(admit, "other", other, theirs)
        await env.wait_lock_waiters(1)
        nursery.start_soon(admit, "claimer", env.store, mine)
        await env.wait_lock_waiters(2)
        await holder.execute("COMMIT")

    assert isinstance(outcomes["other"], Admitted)
    assert outcomes["claimer"] == FenceLost("p", "t0000", part="owner")
    assert env.store.ssi_retries == 1
    assert all(d.sqlstate != "23505" for d in env.sink.items)
    assert env.sink.items == []
    [run] = await env.su("SELECT run_id, idempotency_key FROM qlsched.runs")
    assert (run["run_id"], run["idempotency_key"]) == (theirs.run_id, mine.idempotency_key)
    assert await env.counts() == Counts(runs=1, attempts=1, events=2)


@pytest.mark.parametrize("reach", ["locator", "key"])
async def test_admit_vs_takeover(env: Env, reach: str) -> None:
    """Admit vs takeover: the first holder's lease expired and another replica took the row;
    both admit the same occurrence (same idempotency key) at once. Only the new holder's Run
    exists, recorded under its fence; the old holder gets FenceLost(owner) whichever order
    the row lock serves them in. By its locator the old holder finds no row version to wait
    for (the takeover replaced it) and is refused at once; by key it waits with the new one."""
    old = await due_claim(env)
    await env.expire_claim("p", "t0000")
    replica = await env.open_store(sink=env.sink)
    [new] = await replica.claim("r2", 1, LEASE_MS)
    old_fire, new_fire = fire_for(old), fire_for(new)
    assert old.locator is not None
    assert old.locator != new.locator
    if reach == "key":
        old_fire = with_locator(old_fire, None)
    assert old_fire.idempotency_key == new_fire.idempotency_key
    holder = await hold_row_lock(env)
    outcomes: dict[str, Outcome] = {}

    async def admit(name: str, store: PostgresStore, fire: FireRequest) -> None:
        [outcomes[name]] = await store.admit([fire])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(admit, "old", env.store, old_fire)
        nursery.start_soon(admit, "new", replica, new_fire)
        await env.wait_lock_waiters(2 if reach == "key" else 1)
        await holder.execute("ROLLBACK")

    assert outcomes["old"] == FenceLost("p", "t0000", part="owner")
    assert isinstance(outcomes["new"], Admitted)
    [run] = await env.su("SELECT * FROM qlsched.runs")
    assert (run["admitted_by_owner"], run["admitted_claim_token"]) == ("r2", new.fence.token)
    assert run["admitted_claim_version"] == old.fence.version + 1
    assert env.sink.items == []


@pytest.mark.parametrize("end", ["COMMIT", "ROLLBACK"])
async def test_admit_vs_open_publish(env: Env, end: str) -> None:
    """Admit vs re-publish: an admin transaction that re-published the trigger (a changed
    cron) holds its schedule row while the admit runs. The admit waits for it, never writes
    around it: if the publish commits, the admit's serialization failure is retried and meets
    RevisionChanged(trigger), no Run; if it rolls back, the admit goes through once."""
    claim = await due_claim(env)
    fire = fire_for(claim)
    admin = await env.connect(env.db.admin_dsn)
    tx = admin.conn.transaction()
    await admin.call(tx.start)
    changed = one_project(1, cron="*/5 * * * *")
    result = await admin.call(publish, admin.conn, changed)
    assert result.triggers == {"p/t0000": "changed"}
    outcomes: list[Outcome] = []

    async def admit() -> None:
        outcomes.extend(await env.store.admit([fire]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(admit)
        await env.wait_lock_waiters(1)
        assert outcomes == []
        await admin.call(tx.commit if end == "COMMIT" else tx.rollback)

    if end == "COMMIT":
        assert outcomes == [RevisionChanged("p", "t0000", part="trigger")]
        assert env.store.ssi_retries == 1
        assert await env.counts() == NOTHING
        row = await env.schedule("p", "t0000")
        assert (row["trigger_revision"], row["next_fire_at_ms"]) == (2, None)
    else:
        [outcome] = outcomes
        assert isinstance(outcome, Admitted)
        assert await env.counts() == Counts(runs=1, attempts=1, events=2)


# --- batches ---------------------------------------------------------------------------------


async def test_batch_leaves_out_a_stale_fence_and_a_changed_revision(env: Env) -> None:
    """One batch statement, five Fires: one sent under a stale token, one whose trigger was
    re-published after the claim. The other three are admitted (each with its Run, Attempt
    and two events); those two get their own outcomes in request order and their rows are
    not rewritten by the admit."""
    ids = ["a", "b", "c", "d", "e"]
    await env.publish(one_project(ids=ids))
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    assert [c.trigger_id for c in claims] == ids
    fires = [fire_for(c) for c in claims]
    fires[1] = restale(fires[1], token=uuid.uuid4())
    spec = one_project(ids=ids)
    changed = [trigger("p", t, cron="*/2 * * * *" if t == "d" else "* * * * *") for t in ids]
    await env.publish(msgspec.structs.replace(spec, triggers=changed))
    before = await env.schedules()

    outcomes = await env.store.admit(fires)

    assert [type(o) for o in outcomes] == [Admitted, FenceLost, Admitted, RevisionChanged, Admitted]
    assert outcomes[1] == FenceLost("p", "b", part="token")
    assert outcomes[3] == RevisionChanged("p", "d", part="trigger")
    assert env.store.admit_statements == 1
    assert await env.runs_by_trigger() == {"a": 1, "c": 1, "e": 1}
    assert await env.counts() == Counts(runs=3, attempts=3, events=6)
    after = await env.schedules()
    assert after["b"] == before["b"]
    assert after["d"] == before["d"]


async def test_event_ids_are_distinct_random_uuids(env: Env) -> None:
    """The admit draws its randomness once per statement and puts each event's place in the
    batch into the id: two batches of four, each one statement (no id collided, or the batch
    would have failed on the key and been admitted row by row), give sixteen different
    version-4 event ids, each Run with its ``run.created`` and ``run.queued``."""
    ids = [f"t{i}" for i in range(8)]
    await env.publish(one_project(ids=ids))
    await env.make_due()
    claims = await env.store.claim("r1", 8, LEASE_MS)
    for batch in (claims[:4], claims[4:]):
        outcomes = await env.store.admit([fire_for(c) for c in batch])
        assert all(isinstance(o, Admitted) for o in outcomes)
    assert env.store.admit_statements == 2  # no batch fell back to admitting row by row

    events = await env.su("SELECT event_id, run_id, seq, type FROM qlsched.run_events")
    assert len({e["event_id"] for e in events}) == len(events) == 16
    assert {(e["event_id"].version, e["event_id"].variant) for e in events} == {(4, uuid.RFC_4122)}
    by_run: dict[uuid.UUID, list[tuple[int, str]]] = {}
    for e in events:
        by_run.setdefault(e["run_id"], []).append((e["seq"], e["type"]))
    assert len(by_run) == 8
    assert all(sorted(v) == [(1, "run.created"), (2, "run.queued")] for v in by_run.values())


def with_locator(fire: FireRequest, locator: str | None) -> FireRequest:
    return msgspec.structs.replace(fire, claim=msgspec.structs.replace(fire.claim, locator=locator))


async def test_stale_locators_fall_back_to_the_key(env: Env) -> None:
    """The locator is a hint, never trusted: a Fire whose locator names another trigger's
    row, or no row at all, writes nothing there, also when the rows left are sent again
    together; each is then admitted alone, by key, and gets its one Run. The neighbour
    whose row it named is admitted once, in the batch."""
    ids = ["a", "b", "c"]
    await env.publish(one_project(ids=ids))
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    assert [c.trigger_id for c in claims] == ids
    assert len({c.locator for c in claims}) == 3
    fires = [fire_for(c) for c in claims]
    fires[0] = with_locator(fires[0], claims[2].locator)  # c's row
    fires[1] = with_locator(fires[1], "(999999,1)")  # past the table's end

    outcomes = await env.store.admit(fires)

    assert [type(o) for o in outcomes] == [Admitted, Admitted, Admitted]
    assert env.store.admit_statements == 4  # the batch, a and b again, then each by key
    assert env.store.ssi_retries == 0
    assert await env.runs_by_trigger() == {"a": 1, "b": 1, "c": 1}
    assert await env.counts() == Counts(runs=3, attempts=3, events=6)


@pytest.mark.parametrize("stale_first", [False, True])
async def test_two_fires_for_one_row_in_a_batch_admit_one(env: Env, stale_first: bool) -> None:
    """A batch holding two Fires for one claimed row (the coordinator never sends one; an
    embedder calling the store might): the Fire whose cursor matches is admitted, the other,
    for an occurrence a minute later under its own key, gets RevisionChanged(cursor) and no
    Run, whichever comes first in the batch."""
    claim = await due_claim(env)
    good = fire_for(claim)
    later = good.scheduled_for_ms + 60_000
    stale = msgspec.structs.replace(
        good,
        scheduled_for_ms=later,
        next_ms=later + 60_000,
        run_id=uuid.uuid4(),
        attempt_id=uuid.uuid4(),
        idempotency_key=good.idempotency_key.rsplit(":", 1)[0] + f":{later}",
    )
    fires = [stale, good] if stale_first else [good, stale]

    outcomes = await env.store.admit(fires)

    expected: list[type] = (
        [RevisionChanged, Admitted] if stale_first else [Admitted, RevisionChanged]
    )
    assert [type(o) for o in outcomes] == expected
    assert RevisionChanged("p", "t0000", part="cursor") in outcomes
    [run] = await env.su("SELECT run_id, idempotency_key FROM qlsched.runs")
    assert (run["run_id"], run["idempotency_key"]) == (good.run_id, good.idempotency_key)
    assert await env.counts() == Counts(runs=1, attempts=1, events=2)


async def test_a_row_moved_by_vacuum_full_is_admitted_by_key(env: Env) -> None:
    """VACUUM FULL rewrites the table, so the tuple id a claim returned may name another
    row version or none: the admit still admits the claimed occurrence exactly once."""
    await env.publish(one_project(ids=["a", "b"]))
    await env.make_due()
    await env.su_exec("UPDATE qlsched.trigger_schedules SET updated_at_ms = updated_at_ms")
    claims = await env.store.claim("r1", 10, LEASE_MS)
    await env.su_exec("VACUUM FULL qlsched.trigger_schedules")
    moved = await env.su_val(
        "SELECT count(*) FROM qlsched.trigger_schedules AS s"
        " JOIN unnest($1::text[]) AS l(locator) ON s.ctid = l.locator::tid",
        [c.locator for c in claims],
    )
    assert moved == 0, "VACUUM FULL left the claimed rows where the claim found them"

    outcomes = await env.store.admit([fire_for(c) for c in claims])

    assert [type(o) for o in outcomes] == [Admitted, Admitted]
    assert await env.runs_by_trigger() == {"a": 1, "b": 1}


async def insert_run_for(env: Env, fire: FireRequest) -> None:
    """A Run already holding ``fire``'s idempotency key, so its admit fails on 23505."""
    await env.su_exec(
        "INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,"
        " task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state,"
        " owner, queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,"
        " admitted_claim_version)"
        " VALUES ($1, 'p', $2, 1, 'task', 1, $3, $4, $5, 'succeeded', 'runtime', 0, 0,"
        " 'elsewhere', $6, 1)",
        uuid.uuid4(),
        fire.claim.trigger_id,
        fire.claim.execution_revision_id,
        fire.scheduled_for_ms,
        fire.idempotency_key,
        uuid.uuid4(),
    )


NO_C = "ALTER TABLE qlsched.runs ADD CONSTRAINT no_c CHECK (trigger_id <> 'c')"
"""An injected constraint only trigger c's Run violates: one bad row in a batch."""


async def test_batch_constraint_error_falls_back_row_by_row(env: Env) -> None:
    """A batch whose statement hits a constraint error (23514, one row's Run violates an
    injected CHECK) is retried one occurrence at a time: every other row is admitted, the
    offending one gets StoreFailed(23514) and its claim is given back at once with the
    failure counted (cursor kept); the fallback is reported as a diagnostic without any
    driver text."""
    ids = ["a", "b", "c", "d"]
    await env.publish(one_project(ids=ids))
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    fires = [fire_for(c) for c in claims]
    await env.su_exec(NO_C)
    c_before = await env.schedule("p", "c")

    outcomes = await env.store.admit(fires)

    assert [type(o) for o in outcomes] == [Admitted, Admitted, StoreFailed, Admitted]
    assert outcomes[2] == StoreFailed("p", "c", sqlstate="23514", exception="CheckViolationError")
    assert env.store.admit_statements == 1 + len(fires)
    assert await env.runs_by_trigger() == {"a": 1, "b": 1, "d": 1}
    assert await env.counts() == Counts(runs=3, attempts=3, events=6)
    c_after = await env.schedule("p", "c")
    assert c_after["next_fire_at_ms"] == c_before["next_fire_at_ms"]
    assert (c_after["claim_token"], c_after["failures"]) == (None, 1)
    assert [(d.code, d.sqlstate, d.count) for d in env.sink.items] == [
        ("admit_batch_fallback", "23514", 4),
        ("admit_failed", "23514", None),
    ]
    assert {d.exception for d in env.sink.items} == {"CheckViolationError"}


async def test_a_key_already_taken_moves_the_cursor_and_is_counted(env: Env) -> None:
    """Rule (issue: a backfill wedged a trigger forever): a Fire whose idempotency key
    already has a Run (another path admitted the occurrence) is never a retry loop. In a
    batch beside other rows, that row's cursor moves past the occurrence with no second
    Run, Attempt or event (``AlreadyAdmitted``), the others are admitted in the same single
    statement, the row counts it in ``already_admitted_total``, and the trigger's next
    occurrence is admitted normally."""
    ids = ["a", "b", "c", "d"]
    await env.publish(one_project(ids=ids))
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    fires = [fire_for(c) for c in claims]
    await insert_run_for(env, fires[2])

    outcomes = await env.store.admit(fires)

    assert [type(o) for o in outcomes] == [Admitted, Admitted, AlreadyAdmitted, Admitted]
    assert env.store.admit_statements == 1
    assert await env.runs_by_trigger() == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert await env.counts() == Counts(runs=4, attempts=3, events=6)
    c = await env.schedule("p", "c")
    assert c["next_fire_at_ms"] == fires[2].next_ms
    assert (c["claim_token"], c["already_admitted_total"], c["failures"]) == (None, 1, 0)
    assert [(d.code, d.trigger_id) for d in env.sink.items] == [("already_admitted", "c")]
    await env.make_due(ids=["c"], age_ms=2_000)
    [again] = await env.store.claim("r1", 10, LEASE_MS)
    [ok] = await env.store.admit([fire_for(again)])
    assert isinstance(ok, Admitted)


async def test_admit_runs_batch_then_one_by_one_then_by_key(env: Env) -> None:
    """The admit's three phases run in order, each once: the batch (here failing on one
    row's constraint), then every Fire alone, then, after all of those, the row whose locator was
    stale, alone and by key. Each admit is its own transaction, so the Runs' transaction ids
    give the order: the stale row's Run is the last written."""
    ids = ["a", "b", "c", "d"]
    await env.publish(one_project(ids=ids))
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    fires = [fire_for(c) for c in claims]
    fires[1] = with_locator(fires[1], "(999999,1)")  # b: past the table's end
    await env.su_exec(NO_C)  # c: its admit fails on a constraint

    outcomes = await env.store.admit(fires)

    assert [type(o) for o in outcomes] == [Admitted, Admitted, StoreFailed, Admitted]
    assert env.store.admit_statements == 1 + len(fires) + 1
    rows = await env.su(
        "SELECT trigger_id FROM qlsched.runs WHERE admitted_by_owner = 'r1'"
        " ORDER BY xmin::text::bigint"
    )
    assert [r["trigger_id"] for r in rows] == ["a", "d", "b"]
    assert [d.code for d in env.sink.items] == ["admit_batch_fallback", "admit_failed"]


async def test_fires_of_two_owners_in_one_admit_are_refused(env: Env) -> None:
    """One admit statement is sent for one owner (a replica claims under one): a call
    holding Fires claimed by two owners raises ``MixedOwners`` before any statement is sent,
    and writes nothing."""
    await env.publish(one_project(ids=["a", "b"]))
    await env.make_due()
    [a] = await env.store.claim("r1", 1, LEASE_MS)
    [b] = await env.store.claim("r2", 1, LEASE_MS)
    before = await env.schedules()

    with pytest.raises(MixedOwners):
        await env.store.admit([fire_for(a), fire_for(b)])

    assert env.store.admit_statements == 0
    assert await env.schedules() == before
    assert await env.counts() == NOTHING


async def due_fires(env: Env, ids: list[str]) -> list[FireRequest]:
    """Publish ``ids`` in project p, make them due, claim them all: their Fires."""
    await env.publish(one_project(ids=ids))
    await env.make_due()
    return [fire_for(c) for c in await env.store.claim("r1", 10, LEASE_MS)]


async def admit_while(
    env: Env, fires: list[FireRequest], meanwhile: Callable[[], Awaitable[None]], limit_s: float
) -> list[Outcome]:
    """Admit ``fires`` in the background; once the admit waits for a row lock, run
    ``meanwhile``; the outcomes once the admit returned."""
    outcomes: list[Outcome] = []

    async def admit() -> None:
        outcomes.extend(await env.store.admit(fires))

    with trio.fail_after(limit_s):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(admit)
            await env.wait_lock_waiters(1)
            await meanwhile()
    return outcomes


@pytest.mark.parametrize("released", [True, False], ids=["released-meanwhile", "held-on"])
async def test_a_held_row_does_not_hold_back_its_batch(env: Env, released: bool) -> None:
    """One row of a batch is held ``FOR UPDATE`` by another session (an admin publish, a
    DBA). The batch statement does not wait for it: the other rows are admitted at once, in
    one transaction, while the held row is left untouched. That row is then admitted alone,
    waiting for it: admitted if the holder lets go within the runtime role's lock_timeout,
    else RetryExhausted(55P03), not retried, its claim intact for a later admit or to
    expire."""
    fires = await due_fires(env, ["a", "b", "c", "d"])
    holder = await hold_row_lock(env, "b")
    before = await env.schedule("p", "b")

    async def meanwhile() -> None:
        assert await env.runs_by_trigger() == {"a": 1, "c": 1, "d": 1}
        if released:
            await holder.execute("ROLLBACK")

    outcomes = await admit_while(env, fires, meanwhile, 10)

    assert [type(o) for o in outcomes[:1] + outcomes[2:]] == [Admitted] * 3
    others = await env.su("SELECT DISTINCT xmin::text FROM qlsched.runs WHERE trigger_id <> 'b'")
    assert len(others) == 1, "the three others are one transaction"
    assert env.store.admit_statements == 2
    assert env.store.ssi_retries == 0
    if released:
        assert isinstance(outcomes[1], Admitted)
        assert await env.counts() == Counts(runs=4, attempts=4, events=8)
        return
    assert outcomes[1] == RetryExhausted("p", "b", attempts=1, sqlstate="55P03")
    assert await env.schedule("p", "b") == before
    await holder.execute("ROLLBACK")
    [late] = await env.store.admit([fires[1]])
    assert isinstance(late, Admitted)
    assert await env.counts() == Counts(runs=4, attempts=4, events=8)


async def test_rows_a_batch_left_are_admitted_together(env: Env) -> None:
    """Two rows of a batch are held by other sessions for a moment (as another replica's
    claim statement keeps a row it found taken locked until it ends). The batch admits the
    others; the two it left are sent again in one statement, at their locators, that waits
    for them, not one statement each: two statements in all, every Fire admitted once."""
    fires = await due_fires(env, ["a", "b", "c", "d", "e"])
    holders = [await hold_row_lock(env, "b"), await hold_row_lock(env, "d")]

    async def meanwhile() -> None:
        assert await env.runs_by_trigger() == {"a": 1, "c": 1, "e": 1}
        for holder in holders:
            await holder.execute("ROLLBACK")

    outcomes = await admit_while(env, fires, meanwhile, 10)

    assert [type(o) for o in outcomes] == [Admitted] * 5
    assert env.store.admit_statements == 2
    late = await env.su(
        "SELECT DISTINCT xmin::text FROM qlsched.runs WHERE trigger_id IN ('b', 'd')"
    )
    assert len(late) == 1, "the two left rows are one transaction"
    assert await env.counts() == Counts(runs=5, attempts=5, events=10)


async def test_a_row_held_on_does_not_hold_back_the_rows_left_with_it(env: Env) -> None:
    """Of two rows a batch left, one is held past the runtime role's lock_timeout (a long
    transaction): the statement sending both again times out, and each is then sent alone:
    the free one is admitted, the held one ends RetryExhausted(55P03) with its claim intact,
    admitted later."""
    fires = await due_fires(env, ["a", "b", "c", "d"])
    held_on = await hold_row_lock(env, "b")
    brief = await hold_row_lock(env, "c")

    async def meanwhile() -> None:
        await brief.execute("ROLLBACK")

    outcomes = await admit_while(env, fires, meanwhile, 30)

    assert [type(o) for o in outcomes] == [Admitted, RetryExhausted, Admitted, Admitted]
    assert outcomes[1] == RetryExhausted("p", "b", attempts=1, sqlstate="55P03")
    assert env.store.admit_statements == 4  # the batch, the two again, then each alone
    await held_on.execute("ROLLBACK")
    [late] = await env.store.admit([fires[1]])
    assert isinstance(late, Admitted)
    assert await env.counts() == Counts(runs=4, attempts=4, events=8)


TICK_TRIGGERS = 200
ONCE_A_YEAR = "0 0 1 1 *"
TICK_BUDGET = 16

SIREAD_SQL = """
SELECT c.relname, l.locktype FROM pg_catalog.pg_locks AS l
  JOIN pg_catalog.pg_class AS c ON c.oid = l.relation
 WHERE l.mode = 'SIReadLock'
   AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND c.relnamespace = 'qlsched'::regnamespace
   AND c.relname <> 'capability'  -- the witness's own read"""

SCHEDULES_SQL = """
SELECT c.relname FROM pg_catalog.pg_class AS c
 WHERE c.oid = 'qlsched.trigger_schedules'::regclass
    OR c.oid IN (SELECT indexrelid FROM pg_catalog.pg_index
                  WHERE indrelid = 'qlsched.trigger_schedules'::regclass)"""


async def siread_locks(env: Env) -> list[tuple[str, str]]:
    """SIRead locks on qlsched's tables and indexes, as (relation, lock type)."""
    return [(r["relname"], r["locktype"]) for r in await env.su(SIREAD_SQL)]


async def test_admit_keeps_no_predicate_lock_on_schedules(env: Env) -> None:
    """Batch admits of neighbouring rows by two replicas must not conflict: the committed
    admit keeps no SERIALIZABLE predicate lock on trigger_schedules or any of its indexes,
    at any level. Each row is reached by its locator (no index leaf page locked) and written
    right after it is read (the write drops the read's tuple lock before the next row is read,
    so no heap page collects more than two and is promoted to a page lock). Observed in
    pg_locks, where an overlapping serializable transaction keeps the admit's SIRead locks;
    that the witness does keep them shows in the admit's reads of the other tables."""
    await env.publish(one_project(20))
    await env.make_due()
    claims = await env.store.claim("r1", TICK_BUDGET, LEASE_MS)
    assert len(claims) == TICK_BUDGET
    witness = await env.connect()
    await witness.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
    await witness.fetch("SELECT 1 FROM qlsched.capability")

    outcomes = await env.store.admit([fire_for(c) for c in claims])

    assert all(isinstance(o, Admitted) for o in outcomes)
    locks = await siread_locks(env)
    schedules = {r["relname"] for r in await env.su(SCHEDULES_SQL)}
    assert {rel for rel, _ in locks} - schedules, "the witness keeps the admit's SIRead locks"
    assert [(rel, kind) for rel, kind in locks if rel in schedules] == []


async def test_admit_pool_probes_small_analysed_tables_by_key(env: Env) -> None:
    """On small, analysed tables the planner would rather scan each table whole than probe
    it by key (measured: a sequential scan of trigger_schedules inside the admit's lock step
    and its UPDATE at 20 rows), and under SERIALIZABLE every such scan is a relation-level
    SIRead lock. The admit pool as the composition root opens it (``ADMIT_SETTINGS``) keeps
    every table of the admit (schedules, projects, triggers, tasks, execution revisions) to
    index probes: no relation-level SIRead lock on any qlsched table."""
    await env.publish(one_project(20))
    await env.make_due()
    await env.su_exec("ANALYZE")
    claims = await env.store.claim("r1", TICK_BUDGET, LEASE_MS)
    witness = await env.connect()
    await witness.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
    await witness.fetch("SELECT 1 FROM qlsched.capability")

    async with open_database(
        env.db.runtime_dsn, isolation="serializable", settings=ADMIT_SETTINGS
    ) as admit_db:
        store = PostgresStore(env.claim_db, admit_db, sink=env.sink)
        outcomes = await store.admit([fire_for(c) for c in claims])

    assert all(isinstance(o, Admitted) for o in outcomes)
    locks = await siread_locks(env)
    assert locks, "the witness keeps the admit's SIRead locks"
    assert [rel for rel, kind in locks if kind == "relation"] == []


async def test_two_replicas_admit_one_cron_tick(env: Env, request: pytest.FixtureRequest) -> None:
    """Two replicas (different owners, separate pools) run claim -> decide -> batch admit
    rounds concurrently over 200 triggers due on the same cron tick until all are admitted:
    exactly one Run per trigger, each with its Attempt and two events, every admit outcome
    Admitted (no retry ran out, no fence lost between replicas), both replicas did work.
    The SERIALIZABLE retry ratio (ssi_retries / admit_statements) is recorded as a test
    property (see the comment at the end)."""
    # Yearly: the decision's next occurrence is months away, so the rows cannot come due a
    # second time while the test runs (an every-minute cron did when it crossed a minute).
    await env.publish(one_project(TICK_TRIGGERS, cron=ONCE_A_YEAR))
    tick = await env.make_due(age_ms=500)
    replicas = {"r1": env.store, "r2": await env.open_store(sink=env.sink)}
    admitted: dict[str, int] = {"r1": 0, "r2": 0}
    others: list[Outcome] = []

    async def replica(owner: str) -> None:
        store = replicas[owner]
        with trio.fail_after(30):
            while sum(admitted.values()) < TICK_TRIGGERS:
                result = await run_round(store, owner, TICK_BUDGET, LEASE_MS)
                for o in result.outcomes:
                    if isinstance(o, Admitted):
                        admitted[owner] += 1
                    else:
                        others.append(o)
                if result.claimed == 0:
                    await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        for owner in replicas:
            nursery.start_soon(replica, owner)

    assert others == []
    assert admitted["r1"] > 0
    assert admitted["r2"] > 0
    assert sum(admitted.values()) == TICK_TRIGGERS
    per_trigger = await env.runs_by_trigger()
    assert len(per_trigger) == TICK_TRIGGERS
    assert set(per_trigger.values()) == {1}
    assert await env.counts() == Counts(
        runs=TICK_TRIGGERS, attempts=TICK_TRIGGERS, events=2 * TICK_TRIGGERS
    )
    assert await env.su_val("SELECT count(DISTINCT scheduled_for_ms) FROM qlsched.runs") == 1
    assert await env.su_val("SELECT min(scheduled_for_ms) FROM qlsched.runs") == tick
    assert env.sink.items == []
    # The SERIALIZABLE retry ratio is recorded, not asserted: it is a rate, and one run of
    # ~13 statements cannot tell 0.1 % from 5 %. Measured over runs of this test: 22 % while
    # the admit scanned the table, 4.6 % with primary-key probes, 0 of 1,301 statements since
    # rows are reached by locator and written as they are read. The deterministic guards of
    # those causes are test_admit_keeps_no_predicate_lock_on_schedules and
    # test_admit_pool_probes_small_analysed_tables_by_key; `qlsched bench` reports the rate.
    retries = sum(s.ssi_retries for s in replicas.values())
    statements = sum(s.admit_statements for s in replicas.values())
    request.node.user_properties += [("ssi_retries", retries), ("admit_statements", statements)]
    assert statements >= 2
