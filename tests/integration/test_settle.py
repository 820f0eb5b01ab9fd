"""Initialize, skip and release check the trigger row as admit does (issue #14, hole 1):
a settle writes nothing unless the trigger row is still the revision and digest the claim
was decided on, however the schedule row looks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from qlsched.core.fence import Claim
from qlsched.core.outcomes import (
    Initialize,
    Initialized,
    Outcome,
    Released,
    RevisionChanged,
    Skip,
    Skipped,
)
from qlsched.postgres.store import PostgresStore
from tests.integration.adapter_support import LEASE_MS, Env, one_project

Settle = Callable[[PostgresStore, Claim], Awaitable[Outcome]]


async def initialize(store: PostgresStore, claim: Claim) -> Outcome:
    return await store.initialize(claim, Initialize(next_ms=10**13))


async def skip(store: PostgresStore, claim: Claim) -> Outcome:
    return await store.skip(claim, Skip(next_ms=10**13, skipped=1))


async def release(store: PostgresStore, claim: Claim) -> Outcome:
    return await store.release(claim)


SETTLES: dict[str, tuple[Settle, type[Outcome], bool]] = {
    "initialize": (initialize, Initialized, False),
    "skip": (skip, Skipped, True),
    "release": (release, Released, True),
}

# Ways the trigger row can move away from the claim without its schedule row moving.
TRIGGER_CHANGES = {
    "revision": "UPDATE qlsched.triggers SET revision = revision + 1",
    "digest": "UPDATE qlsched.triggers SET content_digest = repeat('0', 64)",
}


async def claimed(env: Env, *, due: bool) -> Claim:
    await env.publish(one_project(1))
    if due:
        await env.make_due()
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    return claim


@pytest.mark.parametrize("change", sorted(TRIGGER_CHANGES))
@pytest.mark.parametrize("verb", sorted(SETTLES))
async def test_settle_refuses_a_claim_whose_trigger_row_moved(
    env: Env, verb: str, change: str
) -> None:
    """Rule: with the fence, state version, cursor and schedule revision all intact, a
    settle still writes nothing when the trigger row is no longer the revision and digest
    the claim returned; the outcome is RevisionChanged(trigger) and the row is untouched.
    With the trigger row intact the same settle succeeds (the control)."""
    fn, ok, due = SETTLES[verb]
    claim = await claimed(env, due=due)
    await env.su_exec(TRIGGER_CHANGES[change])
    before = await env.schedule("p", "t0000")

    assert await fn(env.store, claim) == RevisionChanged("p", "t0000", part="trigger")
    assert await env.schedule("p", "t0000") == before

    await env.su_exec("DELETE FROM qlsched.trigger_schedules")
    await env.su_exec("DELETE FROM qlsched.triggers")
    control = await claimed(env, due=due)
    assert isinstance(await fn(env.store, control), ok)
