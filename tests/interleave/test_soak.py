"""A seeded randomized soak: real replica processes under publishes and faults, checked by
the explorer's oracle.

Three ``python -m qlsched run`` replicas (3 s lease) on our own PostgreSQL. Project
``gate`` has four every-second control triggers that are never republished (the oracle's
no-silent-loss window covers them end to end); project ``churn`` has four triggers of
their own task that the soak keeps republishing. One random stream (``QLSCHED_SOAK_SEED``
replays it) picks, again and again, one of:

* publish: a cron change (every second / every 2 s / every 3 s / every minute / yearly),
  an enable toggle, a task change in a file listing a random subset of the triggers, a
  prune (a file listing a subset, ``--prune``), a project archive toggle;
* SIGKILL a replica (restarted after a moment), SIGSTOP one for up to 5 s (past its
  lease: its claims are taken over) then SIGCONT;
* an immediate-mode PostgreSQL restart (crash recovery);
* a clock jump: a replica restarted with its wall clock shifted by up to a day either way
  (``tests.support.faults.clock_shift_env``; a running process's clock cannot be moved
  from outside without root, and the product reads only the database's clock);
* a pause (the replicas just run);
* schedule control on project ``ctl`` (its own triggers, so the oracle's windows above
  stay whole): ``pause`` and ``resume`` (either catch-up) of a random trigger, a
  trigger-now, a backfill of a random past range, and a publish that adds a trigger
  (sometimes while others are paused);
* the worker: a ``qlsched work`` process runs every Run (project ``ovl`` has a 1.5 s job
  on every-second triggers under overlap ``skip``, ``buffer_one`` and ``cancel_other``,
  the last with a start deadline); it is SIGKILLed (restarted after a moment) or
  SIGSTOPped past its lease, and ``ovl`` gets trigger-now and backfill requests. A second
  worker, ``work --task`` for the ``churn`` and ``ovl`` tasks, races it for those Runs
  with the task-filtered claim.

Retention is on at its shortest (60 s): the replicas delete finished Runs past the horizon
while all of the above goes on. The oracle reads every Run any snapshot has seen (a pruned
Run was seen before: it lives at least 60 s after it ended), and after every action every
Run that has gone since the last look must have ended before the horizon (retention never
deletes an unfinished Run, nor one too young); at the end, none older than the horizon and
its pass interval is left.

After every action the accounting (``tools.accounting``: Runs + pruned + skipped +
coalesced + paused + overlap-skipped - backfilled equals the cron's occurrences over each
row's window) is checked on the ``gate``, ``ctl`` and ``ovl`` rows, as one statement's snapshot,
and so is the overlap promise (``skip``: never two Runs queued or running; ``buffer_one``:
never two, and never two held); at the end, with every
trigger resumed and the replicas given a few seconds, no request is left failing or held
and no row is stuck.

After every action the oracle (``oracle.check``) runs on one committed snapshot of the
database (every rule holds in every committed state: a stranded trigger or a cursor off
its spec may be healed by a later publish), and once more after the replicas stopped; the
publish history is read back right after each publish. It runs ``QLSCHED_SOAK_SECONDS``
(default 60; 600 or more for a real soak, with ``-o faulthandler_timeout=0`` so pytest
does not dump stacks at its five-minute mark).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_asyncio

from qlsched.core.control import TriggerRef
from qlsched.core.pause import CATCH_UPS
from qlsched.core.retention import RETENTION_MIN_MS
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.embedded import EmbeddedPostgres, open_embedded
from qlsched.postgres.control import pause, resume
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.publish import publish
from qlsched.postgres.requests import record_backfill, record_trigger_now
from qlsched.postgres.retention import set_retention
from qlsched.tools.accounting import account, unbalanced
from tests.interleave.oracle import (
    History,
    Row,
    RunRow,
    Start,
    check,
    read_rows,
    read_runs,
    record_revisions,
)
from tests.support.faults import (
    NOW_MS_SQL,
    PROJECT,
    GateDb,
    ReplicaProcess,
    clock_shift_env,
    create_gate_db,
    every_second_triggers,
    open_su,
    publish_triggers,
    report,
    seed_cursors,
)
from tests.worker.proc_support import WorkerProcess

pytestmark = pytest.mark.slow

SOAK_SECONDS = float(os.environ.get("QLSCHED_SOAK_SECONDS") or 60)
CHURN = "churn"
CHURN_TASK = "churn-job"
CHURN_IDS = tuple(f"c{i}" for i in range(4))
CRONS = ("* * * * * *", "*/2 * * * * *", "*/3 * * * * *", "* * * * *", "0 0 1 1 *")
ACTIONS = {
    "cron": 4,
    "toggle": 2,
    "task": 2,
    "prune": 1,
    "archive": 1,
    "kill": 2,
    "stop": 2,
    "db_restart": 1,
    "clock": 1,
    "pause": 3,
    "ctl_pause": 2,
    "ctl_resume": 2,
    "ctl_now": 2,
    "ctl_backfill": 2,
    "ctl_publish": 1,
    "worker_kill": 1,
    "worker_stop": 1,
    "ovl_request": 1,
}
CTL = "ctl"
CTL_TASK = "ctl-job"
OVL = "ovl"
OVL_FILE = PublishFile(
    projects=[ProjectEntry(id=OVL)],
    tasks=[TaskEntry(project=OVL, id="slow", command="sleep 1.5")],
    triggers=[
        TriggerEntry(project=OVL, id="o-skip", task="slow", cron=CRONS[0], overlap="skip"),
        TriggerEntry(project=OVL, id="o-buffer", task="slow", cron=CRONS[0], overlap="buffer_one"),
        TriggerEntry(
            project=OVL,
            id="o-cancel",
            task="slow",
            cron=CRONS[1],
            overlap="cancel_other",
            start_deadline_ms=3_000,
        ),
    ],
)
RETENTION_MS = RETENTION_MIN_MS
RETENTION_SLACK_MS = 30_000
"""How long past the horizon a finished Run may wait for a replica's pass (the pass interval
is a few cadences; a server restart or a stopped replica costs some more)."""
RUN_LIVES_SQL = """
SELECT r.run_id, r.state, r.finished_at_ms, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
  FROM qlsched.runs AS r
"""
OVERLAP_SQL = """
SELECT r.trigger_id, t.overlap,
       count(*) FILTER (WHERE r.state IN ('queued', 'running'))::int AS active,
       count(*) FILTER (WHERE r.state = 'held')::int AS held
  FROM qlsched.runs AS r
  JOIN qlsched.triggers AS t USING (project_id, trigger_id)
 WHERE r.project_id = 'ovl' AND r.state IN ('held', 'queued', 'running')
 GROUP BY r.trigger_id, t.overlap
"""


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


@dataclasses.dataclass
class Churn:
    """What the soak last published for project ``churn`` (the database may refuse it)."""

    crons: dict[str, str]
    enabled: dict[str, bool]
    command: str = "true"
    archived: bool = False

    def file(self, listed: tuple[str, ...] = CHURN_IDS) -> PublishFile:
        return PublishFile(
            projects=[ProjectEntry(id=CHURN, archived=self.archived)],
            tasks=[TaskEntry(project=CHURN, id=CHURN_TASK, command=self.command)],
            triggers=[
                TriggerEntry(
                    project=CHURN,
                    id=t,
                    task=CHURN_TASK,
                    cron=self.crons[t],
                    misfire="fire_once" if i % 2 else "skip",
                    misfire_grace_ms=2_000,
                    enabled=self.enabled[t],
                )
                for i, t in enumerate(CHURN_IDS)
                if t in listed
            ],
        )


class Soak:
    def __init__(
        self, rng: random.Random, server: EmbeddedPostgres, db: GateDb, workdir: Path
    ) -> None:
        self.rng = rng
        self.server = server
        self.db = db
        self.workdir = workdir
        self.history: History = {}
        self.churn = Churn(dict.fromkeys(CHURN_IDS, CRONS[0]), dict.fromkeys(CHURN_IDS, True))
        self.counts: collections.Counter[str] = collections.Counter()
        self.findings: dict[str, str] = {}
        """Finding -> when it was first seen."""
        self.last = ""
        self.ctl_ids = ["k0", "k1", "k2"]
        # soak-c claims two rows a round, growing to eight while it catches up: its rounds
        # are often full, so the catch-up budget (and its halving after a round that
        # outlived its lease: SIGSTOPs) runs under every fault below.
        small = {"QLSCHED_CLAIM_BUDGET": "2", "QLSCHED_CATCH_UP_BUDGET": "8"}
        self.replicas = [
            ReplicaProcess(f"soak-{n}", db.runtime_dsn, workdir, extra_env=env)
            for n, env in (("a", None), ("b", None), ("c", small))
        ]
        self.worker = WorkerProcess(
            "soak-w", db.dsn("qlsched_worker"), workdir, lease_ms=3_000, concurrency=8
        )
        tasks = ["--task", f"{CHURN}/{CHURN_TASK}", "--task", f"{OVL}/slow"]
        self.task_worker = WorkerProcess(
            "soak-t", db.dsn("qlsched_worker"), workdir, lease_ms=3_000, extra=tasks
        )
        self.seen_runs: dict[RunRow, None] = {}
        """Every Run any snapshot held, in order: retention deletes Runs the oracle must
        still count."""
        self.lives: dict[str, tuple[str, int | None]] = {}
        """Each Run's state and end at the last look, by id."""
        self.pruned_seen = 0

    # --- database access that rides out a restart -----------------------------------------

    async def _retry(self, dsn: str, fn: Any, *, attempts: int = 100) -> Any:
        for attempt in range(attempts):
            try:
                return await connect_once(dsn, fn)
            except Exception:
                if attempt == attempts - 1:
                    raise
                await trio.sleep(0.2)
        raise AssertionError("unreachable")

    async def record(self) -> None:
        async def fn(conn: Connection) -> None:
            for project in (PROJECT, CHURN):
                await record_revisions(conn, project, self.history)

        await self._retry(self.db.superuser_dsn, fn)

    async def publish(self, spec: PublishFile, *, prune: bool = False) -> bool:
        """Publish once (never retried: a publish is not idempotent across a lost reply
        here, as the file may be refused); then read the revisions back."""
        try:
            await connect_once(self.db.admin_dsn, lambda conn: publish(conn, spec, prune=prune))
            ok = True
        except Exception:
            self.counts["publish_refused_or_failed"] += 1
            ok = False
        await self.record()
        return ok

    async def snapshot(self) -> tuple[list[Row], list[RunRow]]:
        """Rows and Runs of both projects, read in one snapshot (as one committed state)."""

        async def fn(conn: Connection) -> tuple[list[Row], list[RunRow]]:
            rows: list[Row] = []
            runs: list[RunRow] = []
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for project in (PROJECT, CHURN):
                    rows += await read_rows(conn, project)
                    runs += await read_runs(conn, project)
            return rows, runs

        rows, runs = await self._retry(self.db.superuser_dsn, fn)
        self.seen_runs.update(dict.fromkeys(runs))
        return rows, list(self.seen_runs)

    async def check_now(self, starts: dict[str, Start], step: int) -> None:
        """The oracle on the committed state now: every rule holds in every committed
        state, not only at the end (a stranded trigger may be healed by a later publish)."""
        rows, runs = await self.snapshot()
        for problem in check(self.history, starts, runs, rows):
            self.findings.setdefault(problem, f"after action {step} ({self.last})")

    # --- actions ---------------------------------------------------------------------------

    async def act(self, kind: str) -> None:
        rng, churn = self.rng, self.churn
        self.counts[kind] += 1
        self.last = kind
        if kind in ("cron", "toggle", "task", "prune", "archive"):
            before = dataclasses.replace(
                churn, crons=dict(churn.crons), enabled=dict(churn.enabled)
            )
            listed = CHURN_IDS
            prune = False
            if kind == "cron":
                for t in rng.sample(CHURN_IDS, rng.randint(1, 2)):
                    churn.crons[t] = rng.choice([c for c in CRONS if c != churn.crons[t]])
            elif kind == "toggle":
                t = rng.choice(CHURN_IDS)
                churn.enabled[t] = not churn.enabled[t]
            elif kind == "task":
                churn.command = f"echo {rng.randrange(1 << 30)}"
                listed = tuple(rng.sample(CHURN_IDS, rng.randint(1, len(CHURN_IDS))))
            elif kind == "prune":
                listed = tuple(rng.sample(CHURN_IDS, rng.randint(1, len(CHURN_IDS))))
                prune = True
                for t in CHURN_IDS:
                    if t not in listed:
                        churn.enabled[t] = False
            else:
                churn.archived = not churn.archived
            if not await self.publish(churn.file(listed), prune=prune):
                self.churn = before
        elif kind == "kill":
            r = rng.choice(self.replicas)
            await r.kill()
            await trio.sleep(rng.uniform(0, 2))
            await self.start(r)
        elif kind == "stop":
            r = rng.choice(self.replicas)
            r.send(signal.SIGSTOP)
            await trio.sleep(rng.uniform(0.5, 5))
            r.send(signal.SIGCONT)
        elif kind == "db_restart":
            await trio.to_thread.run_sync(self.server.stop, "immediate")
            await trio.sleep(rng.uniform(0.3, 2))
            await trio.to_thread.run_sync(self.server.start)
        elif kind == "clock":
            r = rng.choice(self.replicas)
            shift = rng.choice([-1, 1]) * rng.randint(60, 86_400)
            env, _ = clock_shift_env(shift, self.workdir)
            await r.kill()
            r.extra_env = env
            await self.start(r)
        elif kind == "worker_kill":
            await self.worker.kill()
            await trio.sleep(rng.uniform(0, 2))
            await self.start_worker()
        elif kind == "worker_stop":
            self.worker.send(signal.SIGSTOP)
            await trio.sleep(rng.uniform(0.5, 5))
            self.worker.send(signal.SIGCONT)
        elif kind == "ovl_request":
            await self.ovl_request()
        elif kind == "pause":
            await trio.sleep(rng.uniform(0.5, 3))
        elif kind.startswith("ctl_"):
            await self.control(kind)
        else:
            raise AssertionError(kind)

    def ctl_file(self) -> PublishFile:
        return PublishFile(
            projects=[ProjectEntry(id=CTL)],
            tasks=[TaskEntry(project=CTL, id=CTL_TASK, command="true")],
            triggers=[
                TriggerEntry(
                    project=CTL,
                    id=t,
                    task=CTL_TASK,
                    cron=CRONS[i % 3],
                    misfire="fire_once" if i % 2 else "skip",
                    misfire_grace_ms=2_000,
                )
                for i, t in enumerate(self.ctl_ids)
            ],
        )

    async def control(self, kind: str) -> None:
        """One schedule-control action on project ``ctl``, as an operator would."""
        rng = self.rng
        ref = TriggerRef(CTL, rng.choice(self.ctl_ids))

        async def fn(conn: Connection) -> Any:
            if kind == "ctl_pause":
                return await pause(conn, ref, note="soak", actor=None)
            if kind == "ctl_resume":
                catch_up = rng.choice(CATCH_UPS)
                return await resume(conn, ref, catch_up=catch_up, actor=None)
            if kind == "ctl_now":
                return await record_trigger_now(conn, ref.project_id, ref.trigger_id)
            now = int(await conn.fetchval(f"SELECT {NOW_MS_SQL}"))
            end = now - rng.randint(0, 20_000)
            return await record_backfill(
                conn,
                ref.project_id,
                ref.trigger_id,
                from_ms=end - rng.randint(0, 30_000),
                to_ms=end,
                max_occurrences=10_000,
            )

        if kind == "ctl_publish":
            self.ctl_ids.append(f"k{len(self.ctl_ids)}")
            if not await self.publish(self.ctl_file()):
                self.ctl_ids.pop()
            return
        try:
            await connect_once(self.db.admin_dsn, fn)
        except Exception:
            self.counts[f"{kind}_failed"] += 1

    async def ovl_request(self) -> None:
        """A trigger-now or a backfill of the last seconds on an ``ovl`` trigger: it
        follows the trigger's overlap policy."""
        rng = self.rng
        trigger = rng.choice(OVL_FILE.triggers).id

        async def fn(conn: Connection) -> Any:
            if rng.random() < 0.5:
                return await record_trigger_now(conn, OVL, trigger)
            now = int(await conn.fetchval(f"SELECT {NOW_MS_SQL}"))
            return await record_backfill(
                conn, OVL, trigger, from_ms=now - 10_000, to_ms=now - 3_000, max_occurrences=100
            )

        try:
            await connect_once(self.db.admin_dsn, fn)
        except Exception:
            self.counts["ovl_request_failed"] += 1

    async def check_accounts(self, step: int) -> None:
        """Every occurrence in exactly one bucket, on the rows that keep one revision; the
        overlap policies' promise on ``ovl``'s Runs, in one snapshot."""

        async def fn(conn: Connection) -> list[str]:
            problems = unbalanced(await account(conn, [PROJECT, CTL, OVL]))
            for r in await conn.fetch(OVERLAP_SQL):
                if r["overlap"] in ("skip", "buffer_one") and r["active"] > 1:
                    problems.append(f"{r['trigger_id']}: {r['active']} Runs queued or running")
                if r["overlap"] == "skip" and r["held"]:
                    problems.append(f"{r['trigger_id']}: a held Run under skip")
                if r["held"] > 1:
                    problems.append(f"{r['trigger_id']}: {r['held']} held Runs")
            return problems

        for problem in await self._retry(self.db.superuser_dsn, fn):
            self.findings.setdefault(problem, f"after action {step} ({self.last})")
        for problem in await self.check_retention():
            self.findings.setdefault(problem, f"after action {step} ({self.last})")

    async def check_retention(self) -> list[str]:
        """Every Run gone since the last look had ended before the horizon, as that look
        and the database's clock now say (a Run ends at most once, so its last-seen end is
        its end)."""

        async def fn(conn: Connection) -> list[Any]:
            return list(await conn.fetch(RUN_LIVES_SQL))

        rows = await self._retry(self.db.superuser_dsn, fn)
        now = max((int(r[3]) for r in rows), default=None)
        current = {str(r[0]): (str(r[1]), r[2]) for r in rows}
        problems: list[str] = []
        for run_id, (state, finished) in self.lives.items():
            if run_id in current:
                continue
            self.pruned_seen += 1
            if finished is None or state not in ("succeeded", "failed", "cancelled"):
                problems.append(f"retention deleted an unfinished Run {run_id} ({state})")
            elif now is not None and finished > now - RETENTION_MS:
                problems.append(f"retention deleted Run {run_id} before its horizon")
        self.lives = current
        return problems

    async def retention_left(self) -> list[str]:
        """Finished Runs past the horizon and its slack that no pass deleted."""

        async def fn(conn: Connection) -> int:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM qlsched.runs WHERE finished_at_ms <"
                    " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint - $1",
                    RETENTION_MS + RETENTION_SLACK_MS,
                )
            )

        left = await self._retry(self.db.superuser_dsn, fn)
        return [f"{left} finished Runs past the horizon left undeleted"] if left else []

    async def start_worker(self, worker: WorkerProcess | None = None) -> None:
        """Start the worker (again; ``worker``: another); a start refused while the server
        restarts is retried."""
        for attempt in range(20):
            try:
                await (worker or self.worker).start()
                return
            except RuntimeError:
                if attempt == 19:
                    raise
                await trio.sleep(0.5)

    async def settle_controls(self) -> list[str]:
        """Resume every ``ctl`` trigger and wait (bounded) for every request to end: what
        is still pending then (held, waiting or failing) and every stuck row is a finding."""

        async def resume_all(conn: Connection) -> None:
            for t in self.ctl_ids:
                await resume(conn, TriggerRef(CTL, t), catch_up="skip", actor=None)

        await self._retry(self.db.admin_dsn, resume_all)

        async def left(conn: Connection) -> list[str]:
            # A backfill that waited (a paused trigger) while retention deleted Runs of its
            # window is refused `before_retention`: the rule, when the deleted Runs lie in it.
            rows = await conn.fetch(
                "SELECT r.kind, r.trigger_id, r.state, r.refused_reason, r.failures,"
                " r.last_failure FROM qlsched.control_requests AS r WHERE r.state <> 'done'"
                " AND NOT (r.refused_reason = 'before_retention' AND EXISTS ("
                "   SELECT 1 FROM qlsched.retention_pruned AS p"
                "    WHERE p.project_id = r.project_id AND p.trigger_id = r.trigger_id"
                "      AND p.through_ms >= r.from_ms))"
            )
            stuck = await conn.fetch(
                "SELECT project_id, trigger_id, failures, last_failure"
                " FROM qlsched.trigger_schedules WHERE failures > 0"
            )
            waiting = await conn.fetch(
                "SELECT h.trigger_id FROM qlsched.runs AS h WHERE h.state = 'held'"
                " AND NOT EXISTS (SELECT 1 FROM qlsched.runs AS u"
                " WHERE u.project_id = h.project_id AND u.trigger_id = h.trigger_id"
                " AND u.state IN ('queued', 'running'))"
            )
            return (
                [f"request left: {tuple(r)}" for r in rows]
                + [f"row failing: {tuple(r)}" for r in stuck]
                + [f"held Run waiting with nothing active: {r[0]}" for r in waiting]
            )

        result: list[str] = []
        for _ in range(60):  # 30 s at most
            result = await self._retry(self.db.superuser_dsn, left)
            if not result:
                break
            await trio.sleep(0.5)
        return result

    async def start(self, r: ReplicaProcess) -> None:
        """Start (again); a start refused while the server restarts is tried again."""
        for attempt in range(20):
            try:
                await r.start()
                return
            except RuntimeError:
                if attempt == 19:
                    raise
                await trio.sleep(0.5)


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("QLSCHED_SOAK_SEED") or random.randrange(1 << 30))
    report(f"QLSCHED_SOAK_SEED={seed} QLSCHED_SOAK_SECONDS={SOAK_SECONDS:g}")
    return random.Random(seed)


async def test_soak(server: EmbeddedPostgres, tmp_path: Path, rng: random.Random) -> None:
    """Rule: under any mix of publishes, crashes, stops, server restarts and clock jumps,
    the end state keeps exactly once (``oracle.check`` finds nothing): no occurrence has two
    Runs, every Run is an occurrence of the revision it names, every row follows its
    trigger's current spec and task, and the control triggers' occurrences all have a Run
    or were counted."""
    async with trio_asyncio.open_loop():
        db = await create_gate_db(server, f"soak_{rng.randrange(1 << 20)}")
        await publish_triggers(db, every_second_triggers(4))
        soak = Soak(rng, server, db, tmp_path)
        await connect_once(db.admin_dsn, lambda conn: publish(conn, soak.churn.file()))
        await connect_once(db.admin_dsn, lambda conn: publish(conn, soak.ctl_file()))
        await connect_once(db.admin_dsn, lambda conn: publish(conn, OVL_FILE))
        await connect_once(
            db.admin_dsn, lambda conn: set_retention(conn, RETENTION_MS, actor="soak")
        )
        async with open_su(db.superuser_dsn) as su:
            baseline = await seed_cursors(su, lead_ms=3000)
        await soak.record()
        starts = {
            t: Start(1, s.cursor_ms, s.skipped, s.coalesced) for (_, t), s in baseline.items()
        }
        kinds = list(ACTIONS)
        weights = [ACTIONS[k] for k in kinds]
        try:
            async with trio.open_nursery() as nursery:
                for r in soak.replicas:
                    nursery.start_soon(soak.start, r)
                nursery.start_soon(soak.start_worker)
                nursery.start_soon(soak.start_worker, soak.task_worker)
            deadline = trio.current_time() + SOAK_SECONDS
            step = 0
            while trio.current_time() < deadline:
                step += 1
                await soak.act(rng.choices(kinds, weights)[0])
                await soak.check_now(starts, step)
                await soak.check_accounts(step)
                await trio.sleep(rng.uniform(0.2, 1.5))
            soak.last = "the end, every ctl trigger resumed"
            for problem in await soak.settle_controls():
                soak.findings.setdefault(problem, soak.last)
            for problem in await soak.retention_left():
                soak.findings.setdefault(problem, soak.last)
        finally:
            with trio.CancelScope(shield=True):
                for r in soak.replicas:
                    await r.stop()
                await soak.worker.stop()
                await soak.task_worker.stop()
        soak.last = "the end, replicas stopped"
        await soak.check_now(starts, step + 1)
        await soak.check_accounts(step + 1)
        rows, runs = await soak.snapshot()
    control = [r for r in rows if r.trigger_id in starts and r.trigger_id not in CHURN_IDS]
    counted = sum(r.skipped + r.coalesced for r in control)
    problems = [f"{when}: {problem}" for problem, when in soak.findings.items()]
    report(
        f"soak: {SOAK_SECONDS:g} s, {step} actions {dict(sorted(soak.counts.items()))};"
        f" {len(runs)} Runs ({sum(1 for r in runs if r.trigger_id in CHURN_IDS)} of churn"
        f" triggers, {soak.pruned_seen} deleted by retention), {len(soak.history)} trigger"
        f" revisions; control triggers: {counted} occurrences skipped/coalesced;"
        f" {len(problems)} findings"
    )
    assert not problems, "\n".join(problems[:50])
