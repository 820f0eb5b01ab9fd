"""``qlsched demo``: a cluster of replica processes, one crashed mid-way, verified exactly once.

What it does, in order:

1. A PostgreSQL: an ephemeral embedded server (no ``--dsn``), or a fresh database
   ``qlsched_demo_<random>`` on the server of a superuser ``--dsn`` (dropped at the end; that
   server's cluster-wide ``qlsched_*`` roles are created when missing and re-configured, as
   ``init-db`` does).
2. ``init-db`` (roles, schema) and ``publish`` of the example triggers
   (``examples/triggers.toml``, packaged in the wheel as ``qlsched/_examples``).
3. ``--replicas`` replicas, each a separate ``python -m qlsched run`` process with its own
   owner name, a short lease (so a takeover shows within the demo) and a fast cadence.
4. Live progress once a second, read with the observer role: Runs admitted per replica,
   lag, takeovers. At 40 % of the window one replica is killed with SIGKILL, if possible
   while it holds claims (see ``_kill_one``): those claims stay locked until their lease
   expires, then a survivor takes them over.
5. After ``--seconds``, the survivors are stopped in order (SIGTERM, then SIGKILL only past
   their stop deadline plus slack, which is reported), and ``verify_exactly_once`` audits
   the database. Exit 0 only if it holds (0 duplicates, 0 lost, every Run well-formed).

Ownership: every process the demo starts is its own, tracked by pid and reaped before it
returns; a guardian process (``qlsched.fleet``) SIGKILLs the replicas and removes their
directory should the demo itself be killed. SIGINT/SIGTERM kill the replicas at once, drop
the ``--dsn`` database, stop the embedded server (its context manager) and exit 130/143.
Nothing is left behind.

What the database decides: lag, lease expiry and takeovers are judged by the database
clock in the rows the monitor reads, never this process's clock.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import secrets
import signal
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, TypeVar

import msgspec
import trio

from qlsched.commands._common import BAD_INPUT, FAILED, fail
from qlsched.core.specs import PublishFile, decode_publish_file
from qlsched.embedded import open_embedded
from qlsched.postgres.dsn import redact
from qlsched.postgres.errors import DatabaseUnavailable
from qlsched.postgres.initdb import init_db
from qlsched.postgres.migrate import RoleTimeouts
from qlsched.postgres.pool import Connection, Database, connect_once, open_database
from qlsched.postgres.publish import publish
from qlsched.tools.fleet import Fleet, Replica, wait_exit
from qlsched.tools.verify import (
    RunSighting,
    ScheduleState,
    TriggerRef,
    VerifyReport,
    drop_database,
    read_schedule_states,
    run_for_occurrence,
    runs_by_owner,
    verify_exactly_once,
)

T = TypeVar("T")

CADENCE_MS = 250
STOP_TIMEOUT_MS = 2_000
STOP_SLACK_S = 3.0
"""Beyond a replica's stop deadline, how long to wait for it before SIGKILL."""
EMBEDDED_LEASE_MS = 4_000
EMBEDDED_TIMEOUTS = RoleTimeouts(
    idle_in_transaction_ms=2_000, lock_timeout_ms=1_000, statement_timeout_ms=2_000
)
"""The runtime role's timeouts must stay below the lease (readiness checks): on our own
server they are lowered with it."""
SERVER_LEASE_MS = 6_000
"""On a ``--dsn`` server the role timeouts keep init-db's defaults (5 s): the roles are
cluster-wide and may serve a real deployment there, so the lease stays above them."""
KILL_AT = 0.4
HUNT_SHARE = 0.3
"""Up to this share of the window is spent looking for a moment when a replica holds claims
(one chance per second, when occurrences fall due; about one in three succeeds), as long as
the lease can still expire and show a takeover before the end; then one is killed anyway."""
SETTLE_S = 0.05
"""After SIGSTOP, how long to let a statement already in the server finish before looking."""
START_TIMEOUT_S = 60.0
MONITOR_PERIOD_S = 0.1
CLEANUP_S = 15.0
MIN_REPLICAS, MAX_REPLICAS = 2, 32
MIN_SECONDS, MAX_SECONDS = 5, 86_400
WIDTH = 100
TRIGGERS_FILE = "triggers.toml"

FENCE = (
    "A fence is what a replica's claim on a trigger carries (owner, random token, version, "
    "lease expiry): every write must still match it, so a replica that lost its claim can "
    "never write again."
)

# ---------------------------------------------------------------------------------------------
# Plan and inputs


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    replicas: int
    seconds: int
    lease_ms: int
    timeouts: RoleTimeouts
    cadence_ms: int = CADENCE_MS
    stop_timeout_ms: int = STOP_TIMEOUT_MS

    @property
    def names(self) -> list[str]:
        return [f"replica-{i}" for i in range(1, self.replicas + 1)]

    def cadence_of(self, index: int) -> int:
        """Replica ``index`` (0-based) runs a round every 250, 300, ... 450 ms: with equal
        cadences whichever replica's rounds happen to come first after each second would
        claim nearly everything; staggered ones take turns."""
        return self.cadence_ms + 50 * (index % 5)


def triggers_source() -> tuple[str, bytes]:
    """The example triggers: ``examples/triggers.toml`` as packaged in the wheel
    (``qlsched/_examples``), else the source tree's; OSError when missing."""
    packaged = resources.files("qlsched").joinpath("_examples", TRIGGERS_FILE)
    if packaged.is_file():
        return str(Path("examples") / TRIGGERS_FILE), packaged.read_bytes()
    checkout = Path(__file__).resolve().parents[3] / "examples" / TRIGGERS_FILE
    return str(Path("examples") / TRIGGERS_FILE), checkout.read_bytes()


# ---------------------------------------------------------------------------------------------
# Replica processes


@dataclass
class DemoReplica(Replica):
    """A replica and what the demo did to it."""

    killed_at_s: float | None = None
    """Seconds into the window when the demo SIGKILLed it (the crash)."""
    stop: str = ""
    """How it ended: 'stopped in order', 'SIGKILL after the stop deadline', ..."""


class DemoFleet(Fleet[DemoReplica]):
    """The replica processes (``qlsched.fleet``), a guardian for them (which also removes the
    work directory should the demo die), and the sync safety net: leaving the ``with``
    SIGKILLs and reaps whatever is still alive."""

    def __init__(self, plan: Plan, workdir: Path) -> None:
        super().__init__(workdir, DemoReplica, guardian_removes_workdir=True)
        self.plan = plan

    def start(self, name: str, runtime_dsn: str) -> DemoReplica:
        plan = self.plan
        flags = [
            "--lease-ms",
            str(plan.lease_ms),
            "--cadence-ms",
            str(plan.cadence_of(len(self.replicas))),
            "--stop-timeout-ms",
            str(plan.stop_timeout_ms),
        ]
        env = {"QLSCHED_IDLE_IN_TRANSACTION_TIMEOUT_MS": str(plan.timeouts.idle_in_transaction_ms)}
        return self.spawn(name, runtime_dsn, flags, env)

    def kill_all(self) -> None:
        for replica in self.replicas:
            if replica.alive():
                replica.signal(signal.SIGKILL)
                replica.stop = replica.stop or "SIGKILL (demo interrupted)"


async def _wait_started(replicas: list[DemoReplica]) -> None:
    """Until every replica printed its started line (readiness passed, HTTP bound)."""
    pending = {r.name: r for r in replicas}
    with trio.fail_after(START_TIMEOUT_S):
        while pending:
            for name, replica in list(pending.items()):
                text = replica.log.read_text(errors="replace") if replica.log.exists() else ""
                for line in text.splitlines():
                    if f"replica {name} started" in line:
                        _, _, where = line.partition(" started")
                        replica.http = where.strip() or None
                        del pending[name]
                        break
                else:
                    if not replica.alive():
                        raise DemoFailed(
                            f"{name} exited during start (code {replica.proc.returncode}):\n"
                            + replica.log_tail()
                        )
            await trio.sleep(0.05)


class DemoFailed(RuntimeError):
    """The demo could not go on (a replica failed to start or died by itself)."""


# ---------------------------------------------------------------------------------------------
# The live view


def _clock(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S")


class Screen:
    """Progress on stdout: a small table redrawn in place on a terminal, plain lines else."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._drawn = 0

    def note(self, text: str) -> None:
        """A line that stays (events), printed above the live table."""
        self._erase()
        print(text, file=self.stream, flush=True)

    def live(self, lines: list[str], plain: str) -> None:
        if not self.tty:
            print(plain, file=self.stream, flush=True)
            return
        self._erase()
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def done(self) -> None:
        self._drawn = 0  # the last table stays on screen

    def _erase(self) -> None:
        if self.tty and self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0


class Fate(msgspec.Struct, frozen=True):
    """What became of a claim the killed replica held."""

    taken_over: bool
    """A survivor claimed the row after the lease expired."""
    settled: bool
    """Nothing about it can change any more (a Run exists, or the cursor moved on)."""
    text: str


LOCKED = Fate(taken_over=False, settled=False, text="locked until its lease expires")


@dataclass
class Held:
    """A claim the killed replica held when it died."""

    state: ScheduleState
    """The row as read at the kill: the victim's fence, the cursor it was to decide."""
    claimed_by: str | None = None
    """The first owner seen on the row under a newer claim (the monitor's 100 ms reads)."""
    fate: Fate = field(default_factory=lambda: LOCKED)


@dataclass
class Window:
    """What the monitor has seen so far (shared by the monitor and the killer tasks)."""

    plan: Plan
    fleet: DemoFleet
    screen: Screen
    db: Database
    start: float = 0.0
    states: list[ScheduleState] = field(default_factory=list)
    first_cursors: dict[TriggerRef, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    victim: DemoReplica | None = None
    held: dict[TriggerRef, Held] = field(default_factory=dict)

    def elapsed(self) -> float:
        return trio.current_time() - self.start

    def observe(self, states: list[ScheduleState]) -> None:
        self.states = states
        for s in states:
            ref = (s.project_id, s.trigger_id)
            if s.next_fire_at_ms is not None:
                self.first_cursors.setdefault(ref, s.next_fire_at_ms)
            held = self.held.get(ref)
            if (
                held is not None
                and held.claimed_by is None
                and s.claim_owner is not None
                and s.claim_version > held.state.claim_version
            ):
                held.claimed_by = s.claim_owner

    def lag_ms(self) -> int:
        due = [
            s.now_ms - s.next_fire_at_ms
            for s in self.states
            if s.active and s.next_fire_at_ms is not None and s.next_fire_at_ms <= s.now_ms
        ]
        return max(due, default=0)

    def takeovers(self) -> int:
        return sum(1 for h in self.held.values() if h.fate.taken_over)

    def render(self) -> None:
        t = self.elapsed()
        lag = self.lag_ms() / 1000
        takeover = "-"
        if self.victim is not None:
            takeover = f"{self.takeovers()} of {len(self.held)} held claims"
        parts: list[str] = []
        rows: list[str] = []
        for r in self.fleet.replicas:
            count = self.runs.get(r.name, 0)
            if r.killed_at_s is not None:
                state, mark = f"KILLED at {r.killed_at_s:.1f} s", " (killed)"
            elif r.alive():
                state, mark = "running", ""
            else:
                state, mark = f"exited ({r.proc.returncode})", " (exited)"
            parts.append(f"{r.name} {count}{mark}")
            http = f"  {r.http}/metrics" if r.http and r.alive() else ""
            rows.append(f"  {r.name:<12} {count:>6}   {state}{http}")
        total = sum(self.runs.values())
        head = (
            f"  {t:5.1f} s of {self.plan.seconds}   runs {total}   lag {lag:.1f} s   "
            f"takeovers {takeover}"
        )
        self.screen.live(
            [head, f"  {'replica':<12} {'runs':>6}   state", *rows],
            f"[{t:5.1f}s] runs: {' | '.join(parts)} | takeovers {takeover} | lag {lag:.1f}s",
        )


async def _read(db: Database, fn: Callable[[Connection], Awaitable[T]]) -> T:
    return await db.run(fn)


async def _monitor(w: Window, until: float) -> None:
    """Poll the schedule rows every 100 ms (first cursors, takeovers), render once a second,
    and notice a replica that dies by itself."""
    next_render = w.start
    while True:
        w.observe(await _read(w.db, read_schedule_states))
        for r in w.fleet.replicas:
            if r.killed_at_s is None and not r.alive():
                raise DemoFailed(
                    f"{r.name} exited by itself (code {r.proc.returncode}):\n{r.log_tail()}"
                )
        now = trio.current_time()
        if now >= next_render:
            w.runs = await _read(w.db, runs_by_owner)
            await _follow(w)
            w.render()
            next_render += 1.0
        if now >= until:
            return
        await trio.sleep(min(MONITOR_PERIOD_S, max(0.0, until - now)))


async def _kill_one(w: Window, at: float, give_up: float) -> None:
    """At ``at``, SIGKILL one replica, if possible while it holds claims.

    A replica holds its claims only for the few milliseconds of a round, so: poll the rows
    as fast as the database answers; when one shows a live claim, SIGSTOP its owner (frozen,
    it can neither admit nor release), read again, and if it still holds claims, SIGKILL it.
    Otherwise SIGCONT and keep looking, until ``give_up``, then kill one anyway. An admit
    the frozen replica had already sent may still commit in the server; the final report
    tells which claims were really left to expire.
    """
    await trio.sleep_until(at)
    by_name = {r.name: r for r in w.fleet.replicas}
    victim: DemoReplica | None = None
    held: list[ScheduleState] = []
    while victim is None:
        states = await _read(w.db, read_schedule_states)
        holders = sorted({s.claim_owner for s in states if s.claimed and s.claim_owner})
        candidates = [by_name[n] for n in holders if n in by_name and by_name[n].alive()]
        late = trio.current_time() >= give_up
        if candidates:
            candidate = random.choice(candidates)
            held = await _frozen_claims(w, candidate)
            if held or late:
                victim = candidate
        elif late:
            alive = w.fleet.alive()
            victim = alive[len(alive) // 2]
        if victim is None:
            await trio.sleep(0.001)
    victim.signal(signal.SIGKILL)  # a stopped process dies of SIGKILL too
    victim.killed_at_s = w.elapsed()
    w.victim = victim
    w.held = {(s.project_id, s.trigger_id): Held(s) for s in held}
    await wait_exit(victim, 10)
    victim.stop = "SIGKILL (the crash)"
    _announce_kill(w, victim, held)


async def _frozen_claims(w: Window, replica: DemoReplica) -> list[ScheduleState]:
    """SIGSTOP ``replica`` and return the live claims it holds, frozen; resume it (SIGCONT)
    unless it holds some, cancelled or not, so that no replica is ever left stopped."""
    replica.signal(signal.SIGSTOP)
    held: list[ScheduleState] = []
    try:
        # A statement it sent before freezing still runs in the server: let it finish.
        await trio.sleep(SETTLE_S)
        states = await _read(w.db, read_schedule_states)
        held = [s for s in states if s.claimed and s.claim_owner == replica.name]
    finally:
        if not held:
            replica.signal(signal.SIGCONT)
    return held


def _announce_kill(w: Window, victim: DemoReplica, held: list[ScheduleState]) -> None:
    t = victim.killed_at_s or 0.0
    if held:
        claims = ", ".join(
            f"{s.project_id}/{s.trigger_id} @ {_clock(s.next_fire_at_ms or 0)}" for s in held
        )
        text = (
            f"!! {t:.1f} s: SIGKILL {victim.name} (pid {victim.pid}) while it held "
            f"{_plural(len(held), 'claim')}: {claims}. Nobody may touch those rows until the "
            f"lease ({w.plan.lease_ms / 1000:g} s) expires; then a survivor claims them under "
            "a new fence."
        )
    else:
        text = (
            f"!! {t:.1f} s: SIGKILL {victim.name} (pid {victim.pid}); it held no claim at that "
            "instant, so the survivors simply carry on."
        )
    w.screen.note("\n".join(_wrap(text, "", "   ")))


# ---------------------------------------------------------------------------------------------
# The demo


async def _run_at(db: Database, ref: TriggerRef, at_ms: int) -> RunSighting | None:
    async def fn(conn: Connection) -> RunSighting | None:
        return await run_for_occurrence(conn, ref[0], ref[1], at_ms)

    return await db.run(fn)


async def _follow(w: Window) -> None:
    """Update the fate of each held claim not yet settled, from the rows last read and the
    Run (if any) at the cursor the victim was to decide. The cursor moves in the same
    transaction that inserts a Run, so a row read *before* the Run that shows the cursor
    moved with no Run at it means the occurrence was skipped."""
    if w.victim is None:
        return
    rows = {(s.project_id, s.trigger_id): s for s in w.states}
    for ref, held in w.held.items():
        if held.fate.settled:
            continue
        cursor = held.state.next_fire_at_ms or 0
        row = rows.get(ref)
        run = await _run_at(w.db, ref, cursor)
        taker = held.claimed_by or "a survivor"
        if run is not None and run.admitted_by_owner == w.victim.name:
            held.fate = Fate(
                taken_over=False,
                settled=True,
                text="its admit had reached the server before the kill and committed",
            )
        elif run is not None:
            late_s = ((run.queued_at_ms or cursor) - cursor) / 1000
            held.fate = Fate(
                taken_over=True,
                settled=True,
                text=f"taken over: {run.admitted_by_owner} admitted the {_clock(cursor)} "
                f"occurrence {late_s:.1f} s after it was due (the lease had to expire first)",
            )
        elif row is not None and row.next_fire_at_ms != cursor:
            held.fate = Fate(
                taken_over=True,
                settled=True,
                text=f"taken over by {taker}: found too late, the {_clock(cursor)} occurrence "
                "was skipped by its misfire policy (counted)",
            )
        elif row is not None and row.claim_version > held.state.claim_version:
            held.fate = Fate(taken_over=True, settled=False, text=f"claimed by {taker}")
        else:
            held.fate = Fate(
                taken_over=False,
                settled=False,
                text="still locked: its lease had not expired when the demo ended",
            )


async def _stop_survivors(fleet: DemoFleet, plan: Plan, screen: Screen) -> list[str]:
    """SIGTERM every survivor, wait for each up to its stop deadline plus slack, SIGKILL the
    ones still alive. Returns the problems (empty when all stopped in order, exit 0)."""
    survivors = fleet.alive()
    for r in survivors:
        r.signal(signal.SIGTERM)
    problems: list[str] = []
    budget = plan.stop_timeout_ms / 1000 + STOP_SLACK_S

    async def stop(r: DemoReplica) -> None:
        if await wait_exit(r, budget):
            code = r.proc.returncode
            r.stop = "stopped in order" if code == 0 else f"exited with code {code}"
            if code != 0:
                problems.append(f"{r.name} exited with code {code} on SIGTERM")
            return
        r.signal(signal.SIGKILL)
        await wait_exit(r, 10)
        r.stop = "SIGKILL: did not stop within its deadline"
        problems.append(f"{r.name} did not stop within {budget:.0f} s of SIGTERM: SIGKILLed")

    async with trio.open_nursery() as nursery:
        for r in survivors:
            nursery.start_soon(stop, r)
    names = ", ".join(r.name for r in survivors)
    if problems:
        screen.note(f"stopping {names}: " + "; ".join(problems))
    else:
        screen.note(f"stopped {names} in order (SIGTERM: drain, release, exit 0)")
    return problems


def _wrap(text: str, indent: str = "  ", hang: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + hang)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _summary(
    w: Window, report: VerifyReport, stop_problems: list[str], source: str, triggers: int
) -> list[str]:
    """What a newcomer reads at the end: what happened, per replica, per trigger, verdict."""
    plan, victim = w.plan, w.victim
    out = ["", "What happened"]
    out += _wrap(
        f"{plan.replicas} replicas (separate processes) scheduled the {triggers} triggers of "
        f"{source} on one PostgreSQL for {plan.seconds} s."
    )
    out += _wrap(FENCE)
    if victim is not None:
        held = f"while it held {_plural(len(w.held), 'claim')}" if w.held else "between rounds"
        out += _wrap(
            f"At {victim.killed_at_s or 0:.1f} s {victim.name} was killed with SIGKILL {held}: "
            "no goodbye, no release."
        )
        for (project_id, trigger_id), h in sorted(w.held.items()):
            out += _wrap(f"{project_id}/{trigger_id}: {h.fate.text}", "    ", "  ")

    out += ["", "Replicas (each a `python -m qlsched run` process)"]
    for r in w.fleet.replicas:
        ended = r.stop
        if r.killed_at_s is not None:
            ended = f"SIGKILL at {r.killed_at_s:.1f} s (the crash)"
        codes = r.diagnostic_codes()
        diag = ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())) or "none"
        out.append(
            f"  {r.name:<12} {w.runs.get(r.name, 0):>5} runs   {ended:<32} diagnostics: {diag}"
        )
    out += _wrap(
        "They compete for every due row (FOR UPDATE SKIP LOCKED): whichever round comes first "
        "claims it, so the split is uneven by nature."
    )

    out += ["", "Per trigger (the occurrences core computes from its first cursor to its current)"]
    out.append(
        f"  {'trigger':<22} {'cron':<14} {'misfire (grace)':<17} {'expected':>8} {'runs':>5} "
        f"{'coalesced':>9} {'skipped':>7} {'lost':>5}"
    )
    for t in report.triggers:
        name = f"{t.project_id}/{t.trigger_id}"
        policy = f"{t.misfire_policy} ({t.misfire_grace_ms / 1000:g} s)"
        out.append(
            f"  {name[:22]:<22} {t.cron[:14]:<14} {policy[:17]:<17} {t.occurrences:>8} "
            f"{t.runs:>5} {t.coalesced:>9} {t.skipped:>7} {t.lost:>5}"
        )

    out += ["", "Verified from the database (observer role, one snapshot)"]
    out.append(f"  {len(report.duplicates)} duplicates   (occurrences with more than one Run)")
    out.append(f"  {len(report.lost)} lost         (occurrences with no Run and not counted)")
    out += _wrap(
        f"{report.skipped} skipped by policy (counted), {report.coalesced} passed over by a "
        "late Fire (coalesced, counted)"
    )
    malformed = len(report.bad_runs) + len(report.bad_attempts) + len(report.bad_events)
    out += _wrap(
        f"{report.runs} runs, {malformed} malformed: each has 1 pristine Attempt, the events "
        "run.created and run.queued, a queue time not before its occurrence, and the fence "
        "it was admitted under",
        hang="  ",
    )
    if report.unexpected:
        out.append(f"  {len(report.unexpected)} unexpected (Runs at no expected occurrence)")
    for label, items in (
        ("duplicate", report.duplicates),
        ("lost", report.lost),
        ("unexpected", report.unexpected),
    ):
        for o in items[:5]:
            out.append(f"    {label}: {o.project_id}/{o.trigger_id} @ {_clock(o.scheduled_for_ms)}")
    for p in (report.bad_runs + report.bad_attempts + report.bad_events)[:5]:
        out.append(f"    run {p.run_id}: {p.problem}")
    for note in stop_problems:
        out += _wrap(f"note: {note}")

    verdict = "exactly once held" if report.ok else "EXACTLY ONCE VIOLATED"
    taken = sum(1 for h in w.held.values() if h.fate.taken_over)
    out += [
        "",
        f"RESULT: {verdict}: {len(report.duplicates)} duplicates, {len(report.lost)} lost, "
        f"{report.runs} runs, {_plural(taken, 'takeover')} after the crash.",
    ]
    return out


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where the demo's database lives."""

    superuser_dsn: str
    database: str
    drop_after: bool
    """A database the demo created on someone's server (``--dsn``): dropped at the end."""
    want_passwords: bool | None


async def _demo(target: Target, plan: Plan, fleet: DemoFleet) -> int:
    screen = Screen(sys.stdout)
    source, raw = triggers_source()
    spec: PublishFile = decode_publish_file(raw)
    report = await init_db(
        target.superuser_dsn,
        database=target.database,
        timeouts=plan.timeouts,
        want_passwords=target.want_passwords,
    )
    dsns = {r.role: r.dsn for r in report.roles}
    print(f"database {target.database}: roles and schema ready (init-db)", flush=True)
    generated = [r.role for r in report.roles if r.generated]
    if generated:
        for line in _wrap(
            f"note: {', '.join(generated)} had no password on this server and now have "
            "generated ones, not shown (the roles are cluster-wide); to choose your own, run "
            "init-db with QLSCHED_<ROLE>_PASSWORD set.",
            "",
            "  ",
        ):
            print(line, flush=True)

    async def publish_fn(conn: Connection) -> int:
        result = await publish(conn, spec)
        return len(result.triggers)

    count = await connect_once(dsns["qlsched_admin"], publish_fn)
    print(f"published {source}: {count} triggers", flush=True)

    async with open_database(
        dsns["qlsched_observer"], max_size=2, application_name="qlsched-demo"
    ) as db:
        print(f"replica logs and diagnostics: {fleet.workdir} (removed at exit)", flush=True)
        for name in plan.names:
            replica = fleet.start(name, dsns["qlsched_runtime"])
            print(f"started {name} (pid {replica.pid})", flush=True)
        await _wait_started(fleet.replicas)
        slowest = plan.cadence_of(min(plan.replicas, 5) - 1)
        for line in _wrap(
            f"all {plan.replicas} replicas ready: lease {plan.lease_ms} ms, cadence "
            f"{plan.cadence_ms}..{slowest} ms, stop deadline {plan.stop_timeout_ms} ms; "
            f"running {plan.seconds} s, one SIGKILL from {plan.seconds * KILL_AT:.0f} s on",
            "",
            "  ",
        ):
            print(line, flush=True)
        w = Window(plan=plan, fleet=fleet, screen=screen, db=db, start=trio.current_time())
        end = w.start + plan.seconds
        kill_at = w.start + plan.seconds * KILL_AT
        give_up = max(
            kill_at + 1.5,
            min(kill_at + plan.seconds * HUNT_SHARE, end - plan.lease_ms / 1000 - 2),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_kill_one, w, kill_at, give_up)
            await _monitor(w, end)
            nursery.cancel_scope.cancel()  # a kill still hunting at the end is moot
        screen.done()
        stop_problems = await _stop_survivors(fleet, plan, screen)
        w.observe(await _read(db, read_schedule_states))
        w.runs = await _read(db, runs_by_owner)
        await _follow(w)

        async def verify(conn: Connection) -> VerifyReport:
            return await verify_exactly_once(conn, first_cursors=w.first_cursors)

        verified = await _read(db, verify)
    for line in _summary(w, verified, stop_problems, source, len(spec.triggers)):
        print(line, flush=True)
    return 0 if verified.ok else 1


def _password_hint() -> str:
    return (
        "if the qlsched roles already have passwords on this server, give them in "
        "QLSCHED_ADMIN_PASSWORD, QLSCHED_RUNTIME_PASSWORD and QLSCHED_OBSERVER_PASSWORD"
    )


def _single_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _run(target: Target, plan: Plan, fleet: DemoFleet) -> int:
    """The Trio program: the demo under a SIGINT/SIGTERM watch, and its clean-up."""
    caught: list[int] = []
    code = 1
    # Like Python's own Ctrl-C handling, respect a SIGINT ignored by whoever started us
    # (nohup, a background job of a script).
    watched = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        watched.append(signal.SIGINT)
    try:
        with trio.open_signal_receiver(*watched) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        caught.append(signum)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch)
                try:
                    code = await _demo(target, plan, fleet)
                finally:
                    nursery.cancel_scope.cancel()
                    # Interrupted or failed: the replicas die now (SIGKILL, by pid) and the
                    # fleet reaps them on exit. Stopped in order already: nothing to do.
                    fleet.kill_all()
                    if target.drop_after:
                        with trio.move_on_after(CLEANUP_S, shield=True):
                            await _drop(target)
    except BaseExceptionGroup as group:
        raise _single_leaf(group) from None
    if caught:
        name = signal.Signals(caught[0]).name
        print(f"qlsched demo: {name}: replicas killed, nothing left behind", file=sys.stderr)
        return 128 + caught[0]
    return code


async def _drop(target: Target) -> None:
    async def fn(conn: Connection) -> None:
        await drop_database(conn, target.database)

    await connect_once(target.superuser_dsn, fn)
    print(f"dropped database {target.database}", flush=True)


def main(args: argparse.Namespace) -> int:
    if not MIN_REPLICAS <= args.replicas <= MAX_REPLICAS:
        return fail(
            "demo",
            f"--replicas {args.replicas}: one replica is killed, so {MIN_REPLICAS}.."
            f"{MAX_REPLICAS} are needed",
            2,
        )
    if not MIN_SECONDS <= args.seconds <= MAX_SECONDS:
        return fail("demo", f"--seconds {args.seconds}: must be {MIN_SECONDS}..{MAX_SECONDS}", 2)
    try:
        triggers_source()
    except OSError as exc:
        return fail("demo", f"the example triggers are missing: {exc.strerror}", 1)
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="qlsched-demo-")))
        if args.dsn:
            plan = Plan(
                replicas=args.replicas,
                seconds=args.seconds,
                lease_ms=SERVER_LEASE_MS,
                timeouts=RoleTimeouts(),
            )
            target = Target(
                superuser_dsn=args.dsn,
                database=f"qlsched_demo_{secrets.token_hex(4)}",
                drop_after=True,
                want_passwords=None,
            )
            print(f"server {redact(args.dsn)}: a fresh database {target.database}", flush=True)
        else:
            plan = Plan(
                replicas=args.replicas,
                seconds=args.seconds,
                lease_ms=EMBEDDED_LEASE_MS,
                timeouts=EMBEDDED_TIMEOUTS,
            )
            print("starting an ephemeral embedded PostgreSQL ...", flush=True)
            server = stack.enter_context(open_embedded(bindir=args.pg_bindir))
            print(
                f"embedded PostgreSQL {server.version} (pid {server.pid}) in {server.data_dir}",
                flush=True,
            )
            target = Target(
                superuser_dsn=server.dsn(),
                database="qlsched",
                drop_after=False,
                want_passwords=False,
            )
        fleet = stack.enter_context(DemoFleet(plan, workdir))
        try:
            return trio.run(_run, target, plan, fleet)
        except BAD_INPUT as exc:
            return fail("demo", str(exc), 2)
        except DatabaseUnavailable as exc:
            hint = f" ({_password_hint()})" if args.dsn else ""
            return fail("demo", f"{exc}{hint}", 1)
        except (*FAILED, DemoFailed) as exc:
            return fail("demo", str(exc), 1)
        except trio.TooSlowError:
            return fail("demo", f"the replicas were not ready within {START_TIMEOUT_S:.0f} s", 1)
