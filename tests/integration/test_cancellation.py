"""Cancellation behaviour on a real PostgreSQL: a round cut at every checkpoint it passes.

The checkpoints are enumerated, not guessed with sleeps: the store's two ``Database`` objects
are wrapped so that every bridge crossing (``Database.run``: one claim, one settle, one batch
admit, each one statement and one implicit transaction, COMMIT included) is counted, and the
n-th crossing is cut, for n = 1, 2, ... until a round completes without reaching n. A cut is
a cancellation of the round's scope (before the call goes out, while it is in flight, after
it came back) or a lifecycle stop whose deadline lands there (or a graceful stop requested
there). A last test cuts a statement while the server is executing it (a test-only trigger
makes it sleep) to check atomicity on the server side.

After every cut: no connection is left checked out of either pool; no runtime backend is
left active or idle in a transaction; each occurrence has nothing or exactly its Run, its
pristine Attempt and 2 events; each claim is cleared or left to expire (still ours, not yet
expired); and, once leftover claims are expired by hand, a fresh round admits what is due
and every occurrence ends up admitted exactly once.

The round's rows, in claim order: an uninitialised trigger (Initialize), one whose cursor is
two hours old under ``skip`` (Skip), one as old under ``fire_once`` and two just due (three
Fires, admitted as one batch): crossings claim, settle, settle, admit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Final, Literal, TypeVar

import pytest
import trio

import qlsched.cluster.lifecycle as lifecycle_module
from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.lifecycle import Lifecycle
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.engine.stats import RoundStats
from qlsched.postgres.pool import Connection, Database, open_database
from qlsched.postgres.store import PostgresStore
from tests.integration.cluster_support import (
    Superuser,
    assert_exactly_once,
    assert_nothing_or_exactly_once,
    open_superuser,
    publish_triggers,
    trigger,
    wait_until,
)
from tests.support.memory_sink import MemorySink
from tests.support.pg import TestDatabase

T = TypeVar("T")

OWNER: Final = "cut"
INIT: Final = "a-init"
SKIP: Final = "b-skip"
ONCE: Final = "c-once"
FIRE1: Final = "d-fire"
FIRE2: Final = "e-fire"
FIRES: Final = (ONCE, FIRE1, FIRE2)
TRIGGERS: Final = (
    trigger(INIT),
    trigger(SKIP),
    trigger(ONCE, misfire="fire_once"),
    trigger(FIRE1),
    trigger(FIRE2),
)
LONG_AGO_MS: Final = 2 * 3_600_000
"""Beyond the misfire grace (60 s): ``skip`` skips it, ``fire_once`` fires it once."""
UNCUT_CROSSINGS: Final = ["admit", "claim", "claim", "claim"]
"""An uncut round, sorted: the claim, then two settles (Initialize, Skip) on the claim pool
beside one batch admit on the admit pool (those three run concurrently, in any order)."""
SETTLE_S: Final = 3.0

Mode = Literal["before", "during", "after", "stop-deadline", "stop-graceful"]


class Cutter:
    """Counts bridge crossings and cuts the n-th one (``arm``), by the armed mode.

    ``before``: the cut lands before the call is sent (the call then never reaches the
    server). ``during``: the call is sent and the cut lands after ``yields`` scheduler
    passes, while it is in flight (or as it returns, when it was quicker). ``after``: the
    call completed on the server and the cut lands as its result comes back (the result is
    lost). The stop modes call ``cut`` (a lifecycle's ``stop``) before the call and let it
    go on: a zero stop deadline then cancels it like ``before``; a graceful stop lets the
    round finish.
    """

    def __init__(self) -> None:
        self.crossings: list[str] = []
        self._n: int | None = None
        self._mode: Mode = "before"
        self._yields = 0
        self._cut: Callable[[], None] = lambda: None
        self.reached = False
        self.nursery: trio.Nursery | None = None
        """Where a ``during`` cut waits its turn: outside the round, so the call under test
        is awaited exactly as in production (no nursery of the test's around it)."""

    def arm(self, n: int, mode: Mode, cut: Callable[[], None], *, yields: int = 0) -> None:
        self.crossings = []
        self._n, self._mode, self._cut, self._yields = n, mode, cut, yields
        self.reached = False

    def disarm(self) -> None:
        self.crossings = []
        self._n = None

    async def cross(self, kind: str, call: Callable[[], Awaitable[T]]) -> T:
        self.crossings.append(kind)
        if len(self.crossings) != self._n:
            return await call()
        self.reached = True
        match self._mode:
            case "before" | "stop-deadline" | "stop-graceful":
                self._cut()
                return await call()
            case "during":
                assert self.nursery is not None
                self.nursery.start_soon(self._cut_later)
                result = await call()
                # The call beat the cut: it lands as the result comes back (like ``after``).
                self._cut()
                await trio.lowlevel.checkpoint()
                return result
            case "after":
                result = await call()
                self._cut()
                await trio.lowlevel.checkpoint()
                return result

    async def _cut_later(self) -> None:
        for _ in range(self._yields):
            await trio.lowlevel.checkpoint()
        self._cut()


class CountingDatabase(Database):
    """The store's view of a pool: every ``run`` is one counted crossing."""

    def __init__(self, inner: Database, kind: str, cutter: Cutter) -> None:
        super().__init__(inner._pool, inner._loop, isolation=inner.isolation)
        self._kind = kind
        self._cutter = cutter

    async def run(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        return await self._cutter.cross(kind=self._kind, call=partial(super().run, fn))


@dataclasses.dataclass
class Seeded:
    """One iteration's occurrences (database times)."""

    now_ms: int
    skip_cursor_ms: int
    scheduled_for: dict[str, int]


def round_config(*, stop_timeout_ms: int = 2_000) -> Config:
    # A long cadence: a lifecycle under test runs exactly one round before it is stopped.
    return Config(owner=OWNER, lease_ms=6_000, cadence_ms=5_000, stop_timeout_ms=stop_timeout_ms)


class Rig:
    """A replica's store and coordinator over counted pools, plus the superuser's hands."""

    def __init__(
        self, su: Superuser, claim_db: CountingDatabase, admit_db: CountingDatabase
    ) -> None:
        self.su = su
        self.claim_db = claim_db
        self.admit_db = admit_db
        self.cutter = claim_db._cutter
        self.sink = MemorySink(replica=OWNER)
        self.store = PostgresStore(claim_db, admit_db, sink=self.sink)
        self._last_fire_ms = 0

    def coordinator(self, config: Config) -> Coordinator:
        return Coordinator(self.store, config, self.sink, Metrics())

    async def seed(self) -> Seeded:
        """Every row unclaimed; INIT uninitialised, SKIP and ONCE two hours late, the two
        FIREs just due. Each iteration's occurrences are new (distinct scheduled_for)."""
        now = await self.su.now_ms()
        fire_at = max(now - 100, self._last_fire_ms + 1)
        self._last_fire_ms = fire_at
        skip_at = now - LONG_AGO_MS
        once_at = fire_at - LONG_AGO_MS
        await self.su.execute(
            "UPDATE qlsched.trigger_schedules SET claim_owner = NULL, claim_token = NULL,"
            " claim_expires_at_ms = NULL, next_fire_at_ms = CASE trigger_id"
            " WHEN $1 THEN NULL WHEN $2 THEN $4::bigint WHEN $3 THEN $5::bigint"
            " ELSE $6::bigint END",
            INIT,
            SKIP,
            ONCE,
            skip_at,
            once_at,
            fire_at,
        )
        return Seeded(
            now_ms=now,
            skip_cursor_ms=skip_at,
            scheduled_for={ONCE: once_at, FIRE1: fire_at, FIRE2: fire_at},
        )

    async def assert_clean(self, where: str) -> None:
        """No connection checked out of either pool; no runtime backend busy."""

        async def pools_idle() -> bool:
            stats = [self.claim_db.statistics(), self.admit_db.statistics()]
            return all(s.size == s.idle for s in stats)

        async def backends_idle() -> bool:
            return await self.su.busy_runtime_backends() == []

        async def discarded_gone() -> bool:
            # A connection a cut call discarded can still hold a statement the server has
            # not read yet (its backend shows idle): it runs, may commit, and only then
            # finds the socket closed. Seen once (PostgreSQL 15, a loaded machine): an
            # admit committed between this check and the reads below. Its backend is gone
            # once it has ended, so wait for the pools' own connections only.
            size = sum(db.statistics().size for db in (self.claim_db, self.admit_db))
            return len(await self.su.runtime_backends()) <= size

        await wait_until(pools_idle, timeout_s=SETTLE_S, what=f"pools idle ({where})")
        await wait_until(backends_idle, timeout_s=SETTLE_S, what=f"no busy backend ({where})")
        await wait_until(
            discarded_gone, timeout_s=SETTLE_S, what=f"discarded backends gone ({where})"
        )

    async def assert_consistent(self, seeded: Seeded, where: str) -> list[str]:
        """Each row whole: claim cleared or still ours and live; settles and admits all or
        nothing. Returns the Fire triggers whose occurrence was admitted."""
        now = await self.su.now_ms()
        rows = await self.su.schedules()
        for tid, r in rows.items():
            if r["claim_token"] is not None:
                assert r["claim_owner"] == OWNER, (where, tid)
                assert r["claim_expires_at_ms"] > now, (where, tid, "claim not left to expire")
        init = rows[INIT]
        if init["next_fire_at_ms"] is not None:
            assert init["next_fire_at_ms"] > now, where
            assert init["claim_token"] is None, (where, "cursor moved, claim kept")
        skip = rows[SKIP]
        if skip["next_fire_at_ms"] != seeded.skip_cursor_ms:
            assert skip["next_fire_at_ms"] > now, where
            assert skip["claim_token"] is None, (where, "cursor moved, claim kept")
        admitted = []
        for tid in FIRES:
            scheduled_for = seeded.scheduled_for[tid]
            occ = await self.su.occurrence(tid, scheduled_for)
            assert_nothing_or_exactly_once(occ)
            r = rows[tid]
            if occ.runs:
                admitted.append(tid)
                assert r["next_fire_at_ms"] > now, (where, tid)
                assert r["last_scheduled_at_ms"] == scheduled_for, (where, tid)
                assert r["claim_token"] is None, (where, tid)
            else:
                assert r["next_fire_at_ms"] == scheduled_for, (where, tid, "cursor moved")
        return admitted

    async def assert_next_round_proceeds(
        self, coordinator: Coordinator, seeded: Seeded, admitted: list[str], where: str
    ) -> None:
        """Leftover claims expired by hand, a fresh uncut round settles everything: it
        admits exactly the occurrences the cut round did not, and each occurrence of this
        iteration then has exactly one Run."""
        self.cutter.disarm()
        await self.su.expire_claims()
        stats = await coordinator.run_round()
        assert_clean_round(stats, where)
        assert stats.admitted == len(FIRES) - len(admitted), (where, stats)
        rows = await self.su.schedules()
        now = await self.su.now_ms()
        assert all(r["claim_token"] is None for r in rows.values()), where
        assert rows[INIT]["next_fire_at_ms"] > now, where
        assert rows[SKIP]["next_fire_at_ms"] > now, where
        for tid in FIRES:
            assert_exactly_once(
                await self.su.occurrence(tid, seeded.scheduled_for[tid]), owner=OWNER
            )
        await self.assert_clean(f"{where}, fresh round")


def assert_clean_round(stats: RoundStats, where: str) -> None:
    assert stats.errors == {}, (where, stats.errors)
    assert stats.races_lost == 0, (where, stats.fence_lost)
    assert (stats.store_failed, stats.commit_unknown, stats.retry_exhausted) == (0, 0, 0), where


@asynccontextmanager
async def open_rig(pg_db: TestDatabase) -> AsyncIterator[Rig]:
    await publish_triggers(pg_db, TRIGGERS)
    cutter = Cutter()
    async with (
        open_superuser(pg_db) as su,
        open_database(pg_db.runtime_dsn, application_name="qlsched-claim") as claim_db,
        open_database(
            pg_db.runtime_dsn, isolation="serializable", application_name="qlsched-admit"
        ) as admit_db,
    ):
        yield Rig(
            su,
            CountingDatabase(claim_db, "claim", cutter),
            CountingDatabase(admit_db, "admit", cutter),
        )


CANCEL_MODES = [
    pytest.param("before", 0, id="before"),
    pytest.param("during", 1, id="during-1-yield"),
    pytest.param("during", 4, id="during-4-yields"),
    pytest.param("after", 0, id="after"),
]


@pytest.mark.parametrize(("mode", "yields"), CANCEL_MODES)
async def test_round_cancelled_at_every_crossing(
    pg_db: TestDatabase, mode: Mode, yields: int
) -> None:
    """Rule: a round cancelled at any checkpoint leaves nothing half-done: Cancelled is
    not swallowed (the round ends), no connection stays checked out, no backend is left
    in a transaction, every settle and admit is all or nothing, claims are cleared or left
    to expire, and the next round admits exactly what is still due (exactly once)."""
    async with open_rig(pg_db) as rig, trio.open_nursery() as nursery:
        rig.cutter.nursery = nursery
        coordinator = rig.coordinator(round_config())
        cut_at = 0
        for n in range(1, 20):
            where = f"{mode}/{yields} at crossing {n}"
            seeded = await rig.seed()
            with trio.CancelScope() as scope:
                rig.cutter.arm(n, mode, scope.cancel, yields=yields)
                stats = await coordinator.run_round()
            crossings = list(rig.cutter.crossings)
            if not rig.cutter.reached:
                # n is past the last checkpoint: this round ran uncut, and is the reference.
                assert not scope.cancelled_caught
                assert crossings[0] == "claim", crossings
                assert sorted(crossings) == UNCUT_CROSSINGS, crossings
                assert_clean_round(stats, where)
                assert stats.admitted == len(FIRES)
                await rig.assert_clean(where)
                await rig.assert_consistent(seeded, where)
                break
            assert scope.cancelled_caught, f"{where}: the cancellation was swallowed"
            cut_at = n
            await rig.assert_clean(where)
            admitted = await rig.assert_consistent(seeded, where)
            await rig.assert_next_round_proceeds(coordinator, seeded, admitted, where)
        assert cut_at == len(UNCUT_CROSSINGS), "not every checkpoint was cut"
        assert rig.sink.items == [], [d.code for d in rig.sink.items]


@pytest.mark.parametrize("mode", ["stop-deadline", "stop-graceful"])
async def test_lifecycle_stop_landing_at_every_crossing(
    pg_db: TestDatabase, mode: Mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: a lifecycle stop that lands at any checkpoint of the round in flight ends the
    lifecycle after that one round and leaves nothing half-done. With a zero deadline the
    round is cut there (claims left to expire); with time to drain (graceful), the round
    settles everything: decisions finish, undecided claims are released under their fence,
    so no claim at all is left behind. Either way the next round admits what is due."""
    # A round that moved cursors is followed by another MIN_WAKE_S later (its next-due
    # reading is stale): one round here, so that next round must not start before the
    # test's own stop after the first one.
    monkeypatch.setattr(lifecycle_module, "MIN_WAKE_S", 60.0)
    stop_timeout_ms = 0 if mode == "stop-deadline" else 2_000
    async with open_rig(pg_db) as rig:
        config = round_config(stop_timeout_ms=stop_timeout_ms)
        cut_at = 0
        for n in range(1, 20):
            where = f"{mode} at crossing {n}"
            seeded = await rig.seed()
            lifecycle = Lifecycle(rig.coordinator(config), config)
            with trio.fail_after(5):
                async with trio.open_nursery() as nursery:
                    rig.cutter.arm(n, mode, lifecycle.stop)
                    await nursery.start(lifecycle.run)
                    await lifecycle.wait_rounds(1)
                    lifecycle.stop()  # when n was past the round's last checkpoint
                    await lifecycle.wait_stopped()
            stats = lifecycle.statistics()
            assert stats.rounds == 1, (where, stats.rounds)
            await rig.assert_clean(where)
            admitted = await rig.assert_consistent(seeded, where)
            if not rig.cutter.reached:
                assert sorted(rig.cutter.crossings) == UNCUT_CROSSINGS
                assert stats.last_round is not None
                assert_clean_round(stats.last_round, where)
                break
            cut_at = n
            if mode == "stop-deadline":
                assert stats.last_round is None, f"{where}: the zero deadline did not cut"
            if mode == "stop-graceful":
                assert stats.last_round is not None, f"{where}: the graceful round was cut"
                assert_clean_round(stats.last_round, where)
                rows = await rig.su.schedules()
                left = [t for t, r in rows.items() if r["claim_token"] is not None]
                assert left == [], f"{where}: claims left behind by a graceful stop: {left}"
            await rig.assert_next_round_proceeds(
                rig.coordinator(round_config()), seeded, admitted, where
            )
        assert cut_at == len(UNCUT_CROSSINGS), "not every checkpoint was reached"
        assert rig.sink.items == [], [d.code for d in rig.sink.items]


SLOW_S: Final = 0.5
SCHEDULES: Final = "qlsched.trigger_schedules"
SLOW_TRIGGERS: Final = {
    # stage: (table, when the trigger fires, the pool whose backend then sleeps)
    # The claim's UPDATE of one unclaimed row (the other rows in the same statement).
    "claim": (
        SCHEDULES,
        "BEFORE UPDATE ON qlsched.trigger_schedules FOR EACH ROW"
        " WHEN (OLD.claim_token IS NULL AND NEW.claim_token IS NOT NULL"
        f" AND NEW.trigger_id = '{INIT}')",
        "qlsched-claim",
    ),
    # The Initialize settle: the claim cleared, no occurrence scheduled.
    "settle": (
        SCHEDULES,
        "BEFORE UPDATE ON qlsched.trigger_schedules FOR EACH ROW"
        " WHEN (OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL"
        " AND OLD.last_scheduled_at_ms IS NOT DISTINCT FROM NEW.last_scheduled_at_ms"
        f" AND NEW.trigger_id = '{INIT}')",
        "qlsched-claim",
    ),
    # The batch admit, after its Runs, Attempts and events are written.
    "admit": (
        "qlsched.run_events",
        "AFTER INSERT ON qlsched.run_events FOR EACH STATEMENT",
        "qlsched-admit",
    ),
}


async def _install_slow_trigger(su: Superuser, stage: str) -> None:
    """A test-only trigger that makes one kind of statement sleep on the server. Created by
    the superuser in this test's database only (role settings are cluster-wide: not those)."""
    _, timing, _ = SLOW_TRIGGERS[stage]
    await su.execute(
        "CREATE FUNCTION public.qlt_slow() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$BEGIN PERFORM pg_catalog.pg_sleep({SLOW_S}); RETURN NEW; END$$"
    )
    await su.execute(f"CREATE TRIGGER qlt_slow {timing} EXECUTE FUNCTION public.qlt_slow()")


async def _sleeping_backend(su: Superuser, application_name: str) -> int | None:
    rows = await su.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND usename = 'qlsched_runtime'"
        " AND application_name = $2 AND state = 'active' AND wait_event = 'PgSleep'",
        su.name,
        application_name,
    )
    return rows[0]["pid"] if rows else None


@pytest.mark.parametrize("stage", sorted(SLOW_TRIGGERS))
async def test_statement_cut_on_the_server_is_all_or_nothing(
    pg_db: TestDatabase, stage: str
) -> None:
    """Rule: cancelling a round while the server is executing its statement (claim, settle
    or admit) returns at once, discards the connection (the pool checks out nothing, the
    cut backend goes away), and the server either committed the whole statement or
    nothing of it: a claim is whole or absent, an Initialize moved the cursor and cleared
    the claim together or neither, an admit wrote the Run, its Attempt, both events and
    the cursor together or none. The next round then admits exactly once."""
    async with open_rig(pg_db) as rig:
        coordinator = rig.coordinator(round_config())
        seeded = await rig.seed()
        await _install_slow_trigger(rig.su, stage)
        table, _, application_name = SLOW_TRIGGERS[stage]
        cut_pid: int | None = None
        ended_after_cut_s: float | None = None
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def cut_round() -> None:
                    with scope:
                        await coordinator.run_round()

                nursery.start_soon(cut_round)
                while cut_pid is None:
                    cut_pid = await _sleeping_backend(rig.su, application_name)
                    await trio.sleep(0.005)
                cut_at = trio.current_time()
                scope.cancel()
            ended_after_cut_s = trio.current_time() - cut_at
        assert scope.cancelled_caught
        # The round does not wait for the server to finish the statement it cut.
        assert ended_after_cut_s < SLOW_S / 2, ended_after_cut_s

        async def cut_backend_gone() -> bool:
            return cut_pid not in {b["pid"] for b in await rig.su.runtime_backends()}

        await wait_until(cut_backend_gone, timeout_s=SETTLE_S, what="the cut backend gone")
        await rig.assert_clean(stage)
        admitted = await rig.assert_consistent(seeded, stage)
        rows = await rig.su.schedules()
        if stage == "claim":
            claimed = {t for t, r in rows.items() if r["claim_token"] is not None}
            assert claimed in (set(), set(rows)), f"a claim statement half done: {claimed}"
            assert {r["claim_version"] for r in rows.values()} == {0 if not claimed else 1}
        await rig.su.execute(f"DROP TRIGGER qlt_slow ON {table}")
        await rig.assert_next_round_proceeds(coordinator, seeded, admitted, stage)
        assert rig.sink.items == [], [d.code for d in rig.sink.items]
