"""The Edge store: ``core.store``'s port over one SQLite file, fenced by a cursor
compare-and-set instead of a lease.

A claim is a read: it writes nothing, so it holds nothing (one process per file, ``lock.py``,
is what keeps a second scheduler away). Its fence is nominal: the owner, a token per claim
call and the row's ``state_version`` as the version, recorded on the Run for the audit. Every
write (``commit``: admits, initializes, skips) runs in one ``BEGIN IMMEDIATE`` transaction
and moves a cursor only ``WHERE trigger_revision = ? AND state_version = ? AND
next_fire_at_ms IS ?`` (and the row is active), in the same transaction as the Run, its
claimed Attempt and its two events, inserted in one batch per table. A constraint failing
anywhere redoes the round row by row, each in a savepoint, so that row alone is left out
(``StoreFailed``); any other SQLite failure undoes the whole round and raises
``EdgeDatabaseError``. The pinned execution revision is re-verified (digest re-computed)
once per revision and round.

Capability (the conformance suite reads it): ``leases = False``. A claim hides no row from the
next claim, there is no expiry and no takeover, and owner, token and claim version are not
part of the fence; revision, state version and cursor are.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from typing import Final

from qlsched.core.fence import Claim, ClaimFence, FireRequest
from qlsched.core.outcomes import (
    Admitted,
    AlreadyAdmitted,
    DigestInvalid,
    DigestPart,
    FenceLost,
    Inactive,
    Initialize,
    Initialized,
    Outcome,
    OverlapSkipped,
    Released,
    RevisionChanged,
    RevisionPart,
    Skip,
    Skipped,
    StoreFailed,
)
from qlsched.core.overlap import Decision
from qlsched.core.store import ScheduleView, Settle
from qlsched.sqlite.database import EdgeDatabase, rollback
from qlsched.sqlite.errors import error_code
from qlsched.sqlite.overlap import cancel_others, count_skipped, decide
from qlsched.sqlite.queries import query
from qlsched.sqlite.runs import RunRows, admitted_as, execution_fault, insert_runs
from qlsched.sqlite.status import schedule_views


def _refusal(conn: sqlite3.Connection, claim: Claim) -> Outcome:
    """Why the compare-and-set touched no row, naming what moved."""
    p, t = claim.project_id, claim.trigger_id
    row = conn.execute(query("schedule_observe"), (p, t)).fetchone()
    if row is None:
        return FenceLost(p, t, part="missing")
    revision, state_version, cursor, active, project_state, enabled = row
    if revision != claim.trigger_revision:
        return RevisionChanged(p, t, part="trigger")
    if project_state != "active":
        return Inactive(p, t, reason="project_archived")
    if not enabled:
        return Inactive(p, t, reason="trigger_disabled")
    if state_version != claim.state_version:
        return FenceLost(p, t, part="state")  # a round, a publish or a pause wrote it since
    if not active:
        return Inactive(p, t, reason="trigger_disabled")
    if cursor != claim.cursor_ms:
        return RevisionChanged(p, t, part="cursor")
    return FenceLost(p, t, part="state")


def _advance(
    conn: sqlite3.Connection,
    claim: Claim,
    next_ms: int,
    scheduled_for_ms: int | None,
    skipped: int,
    coalesced: int,
    now_ms: int,
) -> bool:
    cursor = conn.execute(
        query("schedule_advance"),
        (
            claim.project_id,
            claim.trigger_id,
            claim.trigger_revision,
            claim.state_version,
            claim.cursor_ms,
            next_ms,
            scheduled_for_ms,
            skipped,
            coalesced,
            now_ms,
            next_ms + claim.jitter_offset_ms(next_ms),
        ),
    )
    return cursor.rowcount == 1


class _Round:
    """One ``commit``'s writes inside its transaction. The execution revision checks are
    made once per revision, not once per Run."""

    def __init__(self, conn: sqlite3.Connection, now_ms: int) -> None:
        self.conn = conn
        self.now_ms = now_ms
        self._faults: dict[tuple[uuid.UUID, int], DigestPart | RevisionPart | None] = {}

    def advance_fire(self, fire: FireRequest) -> Outcome | None:
        """Verify a Fire and move its cursor (compare-and-set); None when it moved."""
        claim = fire.claim
        p, t = claim.project_id, claim.trigger_id
        if claim.cursor_ms != fire.scheduled_for_ms:
            return RevisionChanged(p, t, part="cursor")
        key = (claim.execution_revision_id, claim.task_revision)
        if key not in self._faults:
            self._faults[key] = execution_fault(self.conn, *key)
        match self._faults[key]:
            case None:
                pass
            case "task":
                return RevisionChanged(p, t, part="task")
            case "executor":
                return DigestInvalid(p, t, part="executor")
            case _:
                return DigestInvalid(p, t, part="execution")
        moved = _advance(
            self.conn, claim, fire.next_ms, fire.scheduled_for_ms, 0, fire.coalesced, self.now_ms
        )
        return None if moved else _refusal(self.conn, claim)

    def decide(self, fire: FireRequest) -> Decision:
        """The overlap policy's decision for a Fire whose cursor moved (``core.overlap``);
        a skip is counted on the row here, in the same transaction."""
        claim = fire.claim
        decision = decide(self.conn, claim.overlap, claim.project_id, claim.trigger_id)
        if decision == "skip":
            count_skipped(self.conn, claim.project_id, claim.trigger_id)
        return decision

    def skipped(self, fire: FireRequest) -> OverlapSkipped:
        claim = fire.claim
        return OverlapSkipped(
            claim.project_id,
            claim.trigger_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            admitted_at_ms=self.now_ms,
        )

    def rows(self, fire: FireRequest, decision: Decision = "queue") -> RunRows:
        """The Run, Attempt and events rows of an admitted Fire."""
        claim, now = fire.claim, self.now_ms
        run_id = str(fire.run_id)
        state, start_by, second = admitted_as(decision, now, claim.start_deadline_ms)
        run = (
            run_id,
            claim.project_id,
            claim.trigger_id,
            claim.trigger_revision,
            claim.task_id,
            claim.task_revision,
            str(claim.execution_revision_id),
            fire.scheduled_for_ms,
            fire.idempotency_key,
            now,
            claim.fence.owner,
            str(claim.fence.token),
            claim.fence.version,
            state,
            start_by,
        )
        attempt = (str(fire.attempt_id), run_id, now)
        events = (str(uuid.uuid4()), str(uuid.uuid4()), run_id, now, claim.fence.owner, second)
        return run, attempt, events

    def insert(self, fires: Sequence[tuple[FireRequest, Decision]]) -> set[uuid.UUID]:
        """Insert the Fires' Runs with their Attempts and events, one batch per table; the
        run ids of those whose key already had a Run (``taken_runs``), left out. A new Run
        under ``cancel_other`` then cancels the trigger's others."""
        rows = [self.rows(f, d) for f, d in fires]
        taken = insert_runs(self.conn, rows)
        for fire, _ in fires:
            claim = fire.claim
            if fire.run_id in taken:
                self.conn.execute(
                    query("count_already_admitted"), (claim.project_id, claim.trigger_id)
                )
            elif claim.overlap == "cancel_other":
                cancel_others(
                    self.conn,
                    claim.project_id,
                    claim.trigger_id,
                    [str(fire.run_id)],
                    self.now_ms,
                    claim.fence.owner,
                )
        return taken

    def write_one(self, fire: FireRequest) -> Outcome:
        """One Fire on its own (the row-by-row redo): cursor, decision, Run."""
        refused = self.advance_fire(fire)
        if refused is not None:
            return refused
        decision = self.decide(fire)
        if decision == "skip":
            return self.skipped(fire)
        return self.outcome(fire, self.insert([(fire, decision)]), decision)

    def outcome(
        self, fire: FireRequest, taken: set[uuid.UUID], decision: Decision = "queue"
    ) -> Admitted | AlreadyAdmitted:
        """The Fire admitted, or its cursor moved past a key another path took."""
        if fire.run_id not in taken:
            return self.admitted(fire, held=decision == "hold")
        claim = fire.claim
        return AlreadyAdmitted(
            claim.project_id,
            claim.trigger_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=self.now_ms,
        )

    def admitted(self, fire: FireRequest, *, held: bool = False) -> Admitted:
        claim = fire.claim
        return Admitted(
            claim.project_id,
            claim.trigger_id,
            run_id=fire.run_id,
            attempt_id=fire.attempt_id,
            scheduled_for_ms=fire.scheduled_for_ms,
            idempotency_key=fire.idempotency_key,
            admitted_at_ms=self.now_ms,
            held=held,
        )


def _settle_one(
    conn: sqlite3.Connection, claim: Claim, decision: Initialize | Skip, now_ms: int
) -> Outcome:
    p, t = claim.project_id, claim.trigger_id
    if isinstance(decision, Initialize):
        if not _advance(conn, claim, decision.next_ms, None, 0, 0, now_ms):
            return _refusal(conn, claim)
        return Initialized(p, t, next_ms=decision.next_ms)
    if not _advance(conn, claim, decision.next_ms, None, decision.skipped, 0, now_ms):
        return _refusal(conn, claim)
    return Skipped(p, t, next_ms=decision.next_ms, skipped=decision.skipped)


_DONE = (Admitted, AlreadyAdmitted, OverlapSkipped, Initialized, Skipped)


class SqliteStore:
    """``ScheduleStore`` and ``ScheduleReader`` over one Edge file.

    Ownership: borrows ``db``; its opener closes it.
    """

    leases: Final = False
    """Claims are reads: no lease, no expiry, no takeover (see the module docstring)."""

    def __init__(self, db: EdgeDatabase) -> None:
        self._db = db

    @property
    def db(self) -> EdgeDatabase:
        """The file this store borrows (its requests are served on the same connection)."""
        return self._db

    def clock(self) -> int:
        """The store's clock (epoch ms): the time its reads and writes are decided on."""
        return self._db.clock()

    # --- the round --------------------------------------------------------------------

    async def claim(self, owner: str, limit: int, lease_ms: int) -> list[Claim]:
        """Read up to ``limit`` due or uninitialised active rows in claim order (no write)."""
        return await self._db.call(lambda conn: self._claim(conn, owner, limit, lease_ms))

    def _claim(
        self, conn: sqlite3.Connection, owner: str, limit: int, lease_ms: int
    ) -> list[Claim]:
        now = self._db.clock()
        token = uuid.uuid4()
        return [
            Claim(
                project_id=r[0],
                trigger_id=r[1],
                trigger_revision=r[2],
                state_version=r[3],
                fence=ClaimFence(
                    owner=owner, token=token, version=r[3], expires_at_ms=now + lease_ms
                ),
                cursor_ms=r[4],
                claimed_at_ms=now,
                cron=r[5],
                timezone=r[6],
                misfire_policy=r[7],
                misfire_grace_ms=r[8],
                trigger_digest=r[9],
                task_id=r[10],
                task_revision=r[11],
                execution_revision_id=uuid.UUID(r[12]),
                dst_gap=r[13],
                dst_fold=r[14],
                jitter_ms=r[15],
                overlap=r[16],
                start_deadline_ms=r[17],
            )
            for r in conn.execute(query("due_rows"), (now, limit))
        ]

    async def commit(
        self, fires: Sequence[FireRequest], settles: Sequence[Settle] = ()
    ) -> list[Outcome]:
        """Write a round in one transaction: the Fires' Runs (with their cursors), then the
        settles; one outcome per write, Fires first, each in request order.

        Raises:
            EdgeDatabaseError: SQLite failed outside a single row (a full disk, a read-only
                file): nothing of the round was written.
        """
        return await self._db.call(lambda conn: self._commit(conn, fires, settles))

    def _commit(
        self,
        conn: sqlite3.Connection,
        fires: Sequence[FireRequest],
        settles: Sequence[Settle],
    ) -> list[Outcome]:
        if not fires and not settles:
            return []
        conn.execute(query("begin_immediate"))
        now = self._db.clock()
        try:
            outcomes = self._write_batched(_Round(conn, now), fires, settles)
        except sqlite3.IntegrityError:
            # A constraint failed somewhere in the batch: redo the round row by row, each in
            # a savepoint, so that row alone is left out (StoreFailed) and the rest commit.
            rollback(conn)
            conn.execute(query("begin_immediate"))
            outcomes = self._write_each(_Round(conn, now), fires, settles)
        conn.execute(query("commit"))
        return outcomes

    @staticmethod
    def _write_batched(
        r: _Round, fires: Sequence[FireRequest], settles: Sequence[Settle]
    ) -> list[Outcome]:
        outcomes: list[Outcome | None] = []
        moved: list[tuple[int, FireRequest, Decision]] = []
        for fire in fires:
            refused = r.advance_fire(fire)
            if refused is None:
                decision = r.decide(fire)
                if decision == "skip":
                    refused = r.skipped(fire)
                else:
                    moved.append((len(outcomes), fire, decision))
            outcomes.append(refused)
        taken = r.insert([(f, d) for _, f, d in moved])
        for i, fire, decision in moved:
            outcomes[i] = r.outcome(fire, taken, decision)
        done: list[Outcome] = [o for o in outcomes if o is not None]
        done.extend(_settle_one(r.conn, c, d, r.now_ms) for c, d in settles)
        return done

    @staticmethod
    def _write_each(
        r: _Round, fires: Sequence[FireRequest], settles: Sequence[Settle]
    ) -> list[Outcome]:
        outcomes: list[Outcome] = []
        writes: list[tuple[Claim, FireRequest | Initialize | Skip]] = [(f.claim, f) for f in fires]
        writes.extend(settles)
        for claim, write in writes:
            r.conn.execute(query("savepoint"))
            outcome: Outcome
            try:
                if isinstance(write, FireRequest):
                    outcome = r.write_one(write)
                else:
                    outcome = _settle_one(r.conn, claim, write, r.now_ms)
            except sqlite3.IntegrityError as exc:
                outcome = StoreFailed(
                    claim.project_id,
                    claim.trigger_id,
                    sqlstate=error_code(exc),
                    exception=type(exc).__name__,
                )
            if not isinstance(outcome, _DONE):
                r.conn.execute(query("savepoint_rollback"))
            r.conn.execute(query("savepoint_release"))
            outcomes.append(outcome)
        return outcomes

    async def admit(self, fires: Sequence[FireRequest]) -> list[Outcome]:
        """Admit a round's Fires together; one outcome per request, in request order."""
        return await self.commit(fires)

    async def initialize(self, claim: Claim, decision: Initialize) -> Outcome:
        [outcome] = await self.commit((), [(claim, decision)])
        return outcome

    async def skip(self, claim: Claim, decision: Skip) -> Outcome:
        [outcome] = await self.commit((), [(claim, decision)])
        return outcome

    async def release(self, claim: Claim) -> Outcome:
        """Nothing to clear (a claim wrote nothing): reports whether the claim still holds."""

        def check(conn: sqlite3.Connection) -> Outcome:
            row = conn.execute(query("schedule_observe"), (claim.project_id, claim.trigger_id))
            observed = row.fetchone()
            if observed is not None and (observed[0], observed[1], observed[2], observed[3]) == (
                claim.trigger_revision,
                claim.state_version,
                claim.cursor_ms,
                1,
            ):
                return Released(claim.project_id, claim.trigger_id)
            return _refusal(conn, claim)

        return await self._db.call(check)

    # --- the reader -------------------------------------------------------------------

    async def due_backlog(self) -> int:
        def count(conn: sqlite3.Connection) -> int:
            return int(conn.execute(query("due_backlog"), (self._db.clock(),)).fetchone()[0])

        return await self._db.call(count)

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        def read(conn: sqlite3.Connection) -> list[ScheduleView]:
            return schedule_views(conn, self._db.clock(), limit)

        return await self._db.call(read)

    async def list_schedules_after(
        self, after: tuple[str, str], limit: int = 1000
    ) -> list[ScheduleView]:
        """The rows after key ``after`` = (project, trigger) in key order (keyset pages)."""

        def read(conn: sqlite3.Connection) -> list[ScheduleView]:
            return schedule_views(conn, self._db.clock(), limit, after)

        return await self._db.call(read)
