"""Shared pieces of the fault and HA gates: servers, replicas, and the end-state verifier.

Servers are our own (``qlsched.embedded``), never the session's: the gates restart, fence
and promote them. Each gate database is made by ``init_db`` with short runtime-role
timeouts (``SHORT_TIMEOUTS``) so that a lease of ~3 s passes readiness and faults play out
in seconds. Replicas are real ``python -m qlsched run`` subprocesses (``ReplicaProcess``)
or, where a gate must read a replica's outcomes, in-process ``open_cluster_control``.

``verify_end_state`` reads the database only (as superuser) and returns every broken rule as
one line; a gate asserts the list is empty. It runs the package's verifier
(``qlsched.tools.verify``) and then these checks of its own, per docs/contract.md §4/§5:

* no occurrence (trigger, revision, scheduled_for) has more than one Run, and each Run's
  idempotency key is ``ql3:cron:v1:<trigger>:<revision>:<scheduled_for>``;
* in each trigger's window, from the cursor the gate seeded (``Baseline``) to the cursor
  at the end, every occurrence (``core.cron.next_after``) has a Run, except as many as the
  row's ``skipped_total`` + ``coalesced_total`` grew by (exactly that many are missing),
  and no Run is for a time that is not an occurrence of the window;
* every Run is queued, runtime-owned, not cancelled, ``queued_at_ms >= scheduled_for_ms``,
  has exactly one Attempt (no 1, ``claimed``, ``remote_worker``, every worker/session/
  lease/offer/callback/start/result/error field NULL) and exactly the two events
  ``run.created`` (seq 1) and ``run.queued`` (seq 2);
* every Run carries the fence it was admitted under: an owner among the gate's replicas, a
  token no other Run carries (one claim admits one occurrence), and a claim version that
  grows with ``scheduled_for`` per trigger and is at most the row's current version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import trio

from qlsched.core.config import Config
from qlsched.core.cron import next_after, parse_cron
from qlsched.core.keys import idempotency_key
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.embedded import SERVER_USER, EmbeddedPostgres, start_embedded
from qlsched.postgres.initdb import init_db
from qlsched.postgres.pool import Connection, Database, connect_once, open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.timeouts import RoleTimeouts
from qlsched.tools.verify import VerifyReport, verify_exactly_once
from tests.support.exposition import without_profile

REPO_ROOT = Path(__file__).resolve().parents[2]

SHORT_TIMEOUTS = RoleTimeouts(
    idle_in_transaction_ms=1000, lock_timeout_ms=500, statement_timeout_ms=1500
)
"""The runtime role's timeouts on the gates' own servers: all below a 3 s lease."""

LEASE_MS = 3000
CADENCE_MS = 500
STOP_TIMEOUT_MS = 1000


def control_config(dsn: str, owner: str) -> Config:
    """An in-process control for the HA gates: a 3 s lease, so takeovers come in seconds
    (the test databases give the runtime role timeouts below it)."""
    return Config(
        dsn=dsn,
        owner=owner,
        lease_ms=3_000,
        cadence_ms=200,
        stop_timeout_ms=1_000,
        idle_in_transaction_timeout_ms=1_000,
    )


LAG_BOUND_MS = LEASE_MS + CADENCE_MS + 2000
"""After a fault, schedule lag must come back below lease + cadence + 2 s."""

PROJECT = "gate"
NOW_MS_SQL = "(EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint"


# ---------------------------------------------------------------------------------------------
# Databases


@dataclasses.dataclass(frozen=True)
class GateDb:
    """One gate database on one of our servers: DSNs per role (Unix socket, trust)."""

    server: EmbeddedPostgres
    name: str

    @property
    def superuser_dsn(self) -> str:
        return self.server.dsn(self.name)

    def dsn(self, role: str) -> str:
        return self.server.dsn(self.name, role)

    @property
    def runtime_dsn(self) -> str:
        return self.dsn("qlsched_runtime")

    @property
    def admin_dsn(self) -> str:
        return self.dsn("qlsched_admin")

    def on(self, server: EmbeddedPostgres) -> GateDb:
        """The same database on another server (a promoted standby)."""
        return GateDb(server, self.name)

    async def replayed_on(self, standby: EmbeddedPostgres, *, timeout_s: float = 30) -> GateDb:
        """The same database on ``standby`` once the standby has replayed everything the
        primary has written so far. A synchronous commit waits for the standby's flush, not
        its replay, so right after the gate database was created it may not exist there yet."""
        async with open_su(self.server.dsn()) as primary:
            written = await fetchval(primary, "SELECT pg_catalog.pg_current_wal_lsn()::text")
        async with open_su(standby.dsn()) as replica:

            async def replayed() -> bool:
                return bool(
                    await fetchval(
                        replica,
                        "SELECT pg_catalog.pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                        written,
                    )
                )

            await poll(replayed, timeout_s=timeout_s, interval_s=0.02)
        return self.on(standby)


async def create_gate_db(server: EmbeddedPostgres, name: str) -> GateDb:
    """Database ``name``: roles (short timeouts), schema, no passwords (trust)."""
    await init_db(server.dsn(), database=name, timeouts=SHORT_TIMEOUTS, want_passwords=False)
    return GateDb(server, name)


def every_second_triggers(
    count: int, *, prefix: str = "t", policies: Iterable[tuple[str, int]] | None = None
) -> list[TriggerEntry]:
    """``count`` every-second triggers, alternating the given (misfire, grace_ms) pairs.

    The default alternates ``fire_once`` (grace 60 s: late occurrences are coalesced) and
    ``skip`` (grace 1.5 s: late ones are skipped), so both counters are exercised.
    """
    pairs = list(policies or [("fire_once", 60_000), ("skip", 1_500)])
    out = []
    for i in range(count):
        misfire, grace = pairs[i % len(pairs)]
        out.append(
            TriggerEntry(
                project=PROJECT,
                id=f"{prefix}{i:02d}",
                task="job",
                cron="* * * * * *",
                misfire=misfire,  # type: ignore[arg-type]
                misfire_grace_ms=grace,
            )
        )
    return out


async def publish_triggers(db: GateDb, triggers: list[TriggerEntry]) -> None:
    spec = PublishFile(
        projects=[ProjectEntry(id=PROJECT)],
        tasks=[TaskEntry(project=PROJECT, id="job", command="true")],
        triggers=triggers,
    )
    await connect_once(db.admin_dsn, lambda conn: publish(conn, spec))


@contextlib.asynccontextmanager
async def open_su(dsn: str) -> AsyncIterator[Database]:
    """A small superuser pool for the gate's own reads and test-side moves."""
    async with open_database(dsn, max_size=2, application_name="qlsched-gate") as db:
        yield db


async def fetch(db: Database, sql: str, *args: Any) -> list[Any]:
    async def fn(conn: Connection) -> list[Any]:
        return list(await conn.fetch(sql, *args))

    return await db.run(fn)


async def fetchval(db: Database, sql: str, *args: Any) -> Any:
    async def fn(conn: Connection) -> Any:
        return await conn.fetchval(sql, *args)

    return await db.run(fn)


async def db_now_ms(db: Database) -> int:
    return int(await fetchval(db, f"SELECT {NOW_MS_SQL}"))


async def poll(
    check: Callable[[], Awaitable[bool]], *, timeout_s: float, interval_s: float = 0.05
) -> None:
    """Await ``check()`` every ``interval_s`` until it is true; fail after ``timeout_s``."""
    with trio.fail_after(timeout_s):
        while True:
            if await check():
                return
            await trio.sleep(interval_s)


def report(line: str) -> None:
    """A gate's numbers, for the run log: shown by ``pytest -s`` and with a failure's
    captured output."""
    sys.stdout.write(f"\n{line}\n")


# ---------------------------------------------------------------------------------------------
# The window and the end-state verifier


@dataclasses.dataclass(frozen=True)
class Start:
    cursor_ms: int
    skipped: int
    coalesced: int


Baseline = dict[tuple[str, str], Start]


async def seed_cursors(db: Database, *, lead_ms: int = 1000) -> Baseline:
    """Set every schedule row's cursor to its first occurrence ``lead_ms`` after database
    now (as superuser, before any replica runs) and return that as the window's start."""
    rows = await fetch(
        db,
        "SELECT s.project_id, s.trigger_id, t.cron, t.timezone FROM qlsched.trigger_schedules s"
        " JOIN qlsched.triggers t USING (project_id, trigger_id)",
    )
    now = await db_now_ms(db)
    baseline: Baseline = {}
    for r in rows:
        first = next_after(parse_cron(r["cron"], r["timezone"]), now + lead_ms)
        await fetch(
            db,
            "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $3"
            " WHERE project_id = $1 AND trigger_id = $2",
            r["project_id"],
            r["trigger_id"],
            first,
        )
        baseline[(r["project_id"], r["trigger_id"])] = Start(first, 0, 0)
    return baseline


@dataclasses.dataclass
class Verdict:
    problems: list[str]
    runs: int
    """Every Run in the database."""
    window_runs: int
    """Runs inside the triggers' windows."""
    expected: int
    """Occurrences in the windows: ``window_runs + skipped + coalesced`` when all is well."""
    skipped: int
    coalesced: int
    """Occurrences without a Run: exactly ``skipped + coalesced`` (the rows' counters)."""
    by_owner: dict[str, int]

    @property
    def missing_counted(self) -> int:
        return self.skipped + self.coalesced

    def summary(self) -> str:
        owners = ", ".join(f"{k}={v}" for k, v in sorted(self.by_owner.items()))
        return (
            f"{self.window_runs} Runs for {self.expected} occurrences in the window "
            f"({self.skipped} skipped, {self.coalesced} coalesced), {self.runs} Runs in all, "
            f"{len(self.problems)} problems; Runs by owner: {owners}"
        )


_RUNS_SQL = """
SELECT r.run_id, r.project_id, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.owner, r.queued_at_ms, r.cancel_requested,
       r.admitted_by_owner, r.admitted_claim_token, r.admitted_claim_version,
       (SELECT count(*) FROM qlsched.attempts a WHERE a.run_id = r.run_id) AS attempts,
       (SELECT count(*) FROM qlsched.attempts a WHERE a.run_id = r.run_id
          AND a.attempt_no = 1 AND a.state = 'claimed' AND a.executor_kind = 'remote_worker'
          AND a.worker_id IS NULL AND a.session_id IS NULL AND a.lease_id IS NULL
          AND a.offer_id IS NULL AND a.callback_token IS NULL AND a.started_at_ms IS NULL
          AND a.result IS NULL AND a.error IS NULL) AS pristine,
       (SELECT coalesce(string_agg(e.seq || ':' || e.type, ',' ORDER BY e.seq), '')
          FROM qlsched.run_events e WHERE e.run_id = r.run_id) AS events
  FROM qlsched.runs r
 ORDER BY r.project_id, r.trigger_id, r.scheduled_for_ms
"""

_SCHEDULES_SQL = """
SELECT s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.claim_version,
       s.skipped_total, s.coalesced_total, t.cron, t.timezone
  FROM qlsched.trigger_schedules s JOIN qlsched.triggers t USING (project_id, trigger_id)
"""


def occurrences(cron: str, timezone: str, start_ms: int, end_ms: int) -> list[int]:
    """``start_ms`` (a cursor: the window's first occurrence) and every occurrence after it
    before ``end_ms``, by the scheduler's own ``next_after``."""
    if end_ms <= start_ms:
        return []
    schedule = parse_cron(cron, timezone)
    out, t = [start_ms], start_ms
    while (t := next_after(schedule, t)) < end_ms:
        out.append(t)
    return out


async def verify_end_state(
    db: Database, baseline: Baseline, *, owners: Iterable[str] | None = None
) -> Verdict:
    """Check the end state (see the module docstring); call with the replicas stopped.

    Runs the package's own verifier (``qlsched.tools.verify.verify_exactly_once``, with
    the baseline cursors as the windows' first cursors) and then the gates' stricter checks
    (exact counter deltas from the baseline, the fence audit); problems of both are listed.
    """
    allowed = set(owners) if owners is not None else None
    first_cursors = {key: start.cursor_ms for key, start in baseline.items()}

    async def package_verifier(conn: Connection) -> VerifyReport:
        return await verify_exactly_once(conn, first_cursors=first_cursors)

    package = await db.run(package_verifier)
    problems: list[str] = [
        f"verify_exactly_once: {name} {item}"
        for name in ("duplicates", "lost", "unexpected", "bad_runs", "bad_attempts", "bad_events")
        for item in getattr(package, name)
    ]
    if package.ok == bool(problems):
        problems.append(f"verify_exactly_once: ok={package.ok} disagrees with its own lists")
    runs = await fetch(db, _RUNS_SQL)
    schedules = {(s["project_id"], s["trigger_id"]): s for s in await fetch(db, _SCHEDULES_SQL)}
    seen: dict[tuple[str, str, int, int], int] = {}
    tokens: dict[Any, str] = {}
    by_owner: dict[str, int] = {}
    last_version: dict[tuple[str, str], int] = {}
    for r in runs:
        key = (r["project_id"], r["trigger_id"])
        occurrence = (*key, r["trigger_revision"], r["scheduled_for_ms"])
        label = f"run {r['trigger_id']}@{r['scheduled_for_ms']}"
        seen[occurrence] = seen.get(occurrence, 0) + 1
        if seen[occurrence] == 2:
            problems.append(f"{label}: more than one Run for the occurrence")
        want_key = idempotency_key(r["trigger_id"], r["trigger_revision"], r["scheduled_for_ms"])
        if r["idempotency_key"] != want_key:
            problems.append(f"{label}: idempotency key {r['idempotency_key']!r}")
        if r["state"] != "queued" or r["owner"] != "runtime" or r["cancel_requested"]:
            problems.append(f"{label}: not a queued runtime-owned Run")
        if r["queued_at_ms"] is None or r["queued_at_ms"] < r["scheduled_for_ms"]:
            problems.append(f"{label}: queued_at_ms {r['queued_at_ms']} before scheduled_for")
        if r["attempts"] != 1 or r["pristine"] != 1:
            problems.append(f"{label}: {r['attempts']} Attempts, {r['pristine']} pristine")
        if r["events"] != "1:run.created,2:run.queued":
            problems.append(f"{label}: events {r['events']!r}")
        owner = r["admitted_by_owner"]
        by_owner[owner] = by_owner.get(owner, 0) + 1
        if allowed is not None and owner not in allowed:
            problems.append(f"{label}: admitted by unknown owner {owner!r}")
        token = r["admitted_claim_token"]
        if token is None or token in tokens:
            problems.append(f"{label}: claim token missing or shared with {tokens.get(token)}")
        tokens[token] = label
        version = r["admitted_claim_version"]
        if version is None or version <= last_version.get(key, 0):
            problems.append(f"{label}: claim version {version} not above the previous Run's")
        last_version[key] = version or 0
        sched = schedules.get(key)
        if sched is not None and version is not None and version > sched["claim_version"]:
            problems.append(f"{label}: claim version {version} above the row's")
    expected_total = skipped_total = coalesced_total = window_total = 0
    by_trigger: dict[tuple[str, str], set[int]] = {}
    for r in runs:
        by_trigger.setdefault((r["project_id"], r["trigger_id"]), set()).add(r["scheduled_for_ms"])
    for key, start in sorted(baseline.items()):
        sched = schedules.get(key)
        if sched is None or sched["next_fire_at_ms"] is None:
            problems.append(f"trigger {key[1]}: no schedule row or no cursor at the end")
            continue
        end = sched["next_fire_at_ms"]
        expected = set(occurrences(sched["cron"], sched["timezone"], start.cursor_ms, end))
        have = {t for t in by_trigger.get(key, set()) if t >= start.cursor_ms}
        extra = sorted(have - expected)
        if extra:
            problems.append(f"trigger {key[1]}: Runs for non-occurrences or past the end {extra}")
        missing = len(expected - have)
        skipped = sched["skipped_total"] - start.skipped
        coalesced = sched["coalesced_total"] - start.coalesced
        counted = skipped + coalesced
        if missing != counted:
            problems.append(
                f"trigger {key[1]}: {missing} occurrences in [{start.cursor_ms}, {end}) have no"
                f" Run but {counted} were counted as skipped/coalesced"
            )
        expected_total += len(expected)
        window_total += len(have & expected)
        skipped_total += skipped
        coalesced_total += coalesced
    return Verdict(
        problems,
        len(runs),
        window_total,
        expected_total,
        skipped_total,
        coalesced_total,
        by_owner,
    )


async def lag_ms(db: Database) -> int:
    """Schedule lag by database time: max over due active rows of now - next_fire_at_ms."""
    value = await fetchval(
        db,
        f"SELECT coalesce(max({NOW_MS_SQL} - s.next_fire_at_ms), 0)"  # noqa: S608 (constant)
        " FROM qlsched.trigger_schedules s"
        f" WHERE s.active AND s.next_fire_at_ms <= {NOW_MS_SQL}",
    )
    return int(value)


@dataclasses.dataclass
class LagRecovery:
    peak_ms: int
    recovered_after_s: float


async def wait_lag_below(
    db: Database,
    bound_ms: int = LAG_BOUND_MS,
    *,
    timeout_s: float = 30.0,
    hold_s: float = (LEASE_MS + CADENCE_MS) / 1000 + 0.5,
) -> LagRecovery:
    """Poll the lag until it has stayed below ``bound_ms`` for ``hold_s``; fail after
    ``timeout_s``. Returns the peak seen and when it came back. The default hold outlasts a
    lease and a cadence, so the peak covers the takeover of claims a fault stranded."""
    started = trio.current_time()
    peak = 0
    below_since: float | None = None
    last = 0
    while True:
        now = trio.current_time()
        try:
            last = await lag_ms(db)
        except Exception:  # the server may be restarting: not below
            last = bound_ms
        peak = max(peak, last)
        if last < bound_ms:
            below_since = now if below_since is None else below_since
            if now - below_since >= hold_s:
                return LagRecovery(peak, below_since - started)
        else:
            below_since = None
        if now - started > timeout_s:
            raise AssertionError(
                f"schedule lag stayed at or above {bound_ms} ms for {timeout_s:.0f} s "
                f"(last {last} ms, peak {peak} ms)"
            )
        await trio.sleep(0.1)


async def run_rows(db: Database, key: str) -> list[Any]:
    return await fetch(
        db,
        "SELECT r.run_id, r.admitted_by_owner, r.admitted_claim_version, r.queued_at_ms,"
        " r.scheduled_for_ms,"
        " (SELECT count(*) FROM qlsched.attempts a WHERE a.run_id = r.run_id) AS attempts,"
        " (SELECT count(*) FROM qlsched.run_events e WHERE e.run_id = r.run_id) AS events"
        " FROM qlsched.runs r WHERE r.idempotency_key = $1",
        key,
    )


# ---------------------------------------------------------------------------------------------
# Servers: a directory the server's OS user can reach; primary + streaming standby


@contextlib.contextmanager
def server_base_dir() -> Iterator[Path]:
    """A fresh directory for persistent data directories, searchable by the server's user
    (pytest's own tmp_path is 0700 root's when we run as root); removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="qlsched-gate-"))
    try:
        base.chmod(0o711)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _server_user() -> pwd.struct_passwd | None:
    return pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None


def base_backup(primary: EmbeddedPostgres, target: Path, *, application_name: str) -> None:
    """``pg_basebackup -R`` of ``primary`` into ``target``, run as the server's OS user (so
    the copy is its own), with ``application_name`` in the written ``primary_conninfo``."""
    user = _server_user()
    target.mkdir(mode=0o700)
    if user is not None:
        os.chown(target, user.pw_uid, user.pw_gid)
    conninfo = (
        f"host={primary.socket_dir} port={primary.port} user=postgres "
        f"application_name={application_name}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    result = subprocess.run(
        [
            str(primary.bindir / "pg_basebackup"),
            "-D",
            str(target),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-d",
            conninfo,
        ],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        extra_groups=[] if user else None,
        umask=0o077,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"pg_basebackup failed ({result.returncode}): {result.stderr[-500:]}")
    auto = (target / "postgresql.auto.conf").read_text()
    if f"application_name={application_name}" not in auto:
        raise RuntimeError("pg_basebackup -R did not keep application_name in primary_conninfo")


SYNC_SETTINGS = {
    "wal_level": "replica",
    "max_wal_senders": "10",
    "synchronous_standby_names": "standby1",
    "synchronous_commit": "on",
}


@contextlib.contextmanager
def ha_pair(base: Path) -> Iterator[tuple[EmbeddedPostgres, EmbeddedPostgres]]:
    """A primary (synchronous_standby_names='standby1', synchronous_commit=on) and its
    streaming standby from ``pg_basebackup``; both stopped on exit."""
    primary = start_embedded(base / "primary", settings=SYNC_SETTINGS)
    standby: EmbeddedPostgres | None = None
    try:
        base_backup(primary, base / "standby", application_name="standby1")
        standby = start_embedded(base / "standby")
        yield primary, standby
    finally:
        if standby is not None:
            standby.cleanup()
        primary.cleanup()


# ---------------------------------------------------------------------------------------------
# Replica subprocesses


LIBFAKETIME_PATHS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)

_SITECUSTOMIZE = '''\
"""Shift this process's wall clock by QLSCHED_GATE_CLOCK_SHIFT_S (a fault gate's stand-in
for libfaketime): time.time/time_ns, localtime/gmtime/ctime/asctime/strftime defaults and
datetime's now/utcnow/today. Monotonic clocks are left alone, as a skewed host's are."""
import datetime as _dt
import os as _os
import time as _time

_SHIFT = float(_os.environ.get("QLSCHED_GATE_CLOCK_SHIFT_S", "0"))
_SHIFT_NS = int(_SHIFT * 1_000_000_000)
_time_real, _time_ns_real = _time.time, _time.time_ns
_localtime, _gmtime, _ctime = _time.localtime, _time.gmtime, _time.ctime
_asctime, _strftime = _time.asctime, _time.strftime


def _now():
    return _time_real() + _SHIFT


_time.time = _now
_time.time_ns = lambda: _time_ns_real() + _SHIFT_NS
_time.localtime = lambda secs=None: _localtime(_now() if secs is None else secs)
_time.gmtime = lambda secs=None: _gmtime(_now() if secs is None else secs)
_time.ctime = lambda secs=None: _ctime(_now() if secs is None else secs)
_time.asctime = lambda t=None: _asctime(_localtime(_now()) if t is None else t)
_time.strftime = lambda fmt, t=None: _strftime(fmt, _localtime(_now()) if t is None else t)


class _datetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls.fromtimestamp(_now(), tz)

    @classmethod
    def utcnow(cls):
        return cls.fromtimestamp(_now(), _dt.timezone.utc).replace(tzinfo=None)

    @classmethod
    def today(cls):
        return cls.fromtimestamp(_now())


class _date(_dt.date):
    @classmethod
    def today(cls):
        return cls.fromtimestamp(_now())


_dt.datetime = _datetime
_dt.date = _date
'''


def libfaketime() -> str | None:
    for path in LIBFAKETIME_PATHS:
        if os.path.exists(path):
            return path
    return None


def clock_shift_env(shift_s: int, workdir: Path) -> tuple[dict[str, str], str]:
    """Environment that shifts a Python child's wall clock by ``shift_s``, and how:
    libfaketime (the whole process, C library included) when installed, else a
    ``sitecustomize`` that shifts Python's time and datetime."""
    lib = libfaketime()
    # QLSCHED_GATE_CLOCK=sitecustomize forces the stand-in (to test it where libfaketime is).
    if lib is not None and os.environ.get("QLSCHED_GATE_CLOCK") != "sitecustomize":
        return {
            "LD_PRELOAD": lib,
            "FAKETIME": f"{shift_s:+d}",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }, "libfaketime"
    site = workdir / f"clock-shift-{shift_s:+d}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": pythonpath, "QLSCHED_GATE_CLOCK_SHIFT_S": str(shift_s)}, "sitecustomize"


def measured_clock_shift_s(env: Mapping[str, str]) -> float:
    """What a Python child started with ``env`` reads as wall time, minus ours (seconds)."""
    before = time.time()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import datetime, time; print(time.time()); print(datetime.datetime.now().timestamp())",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    after = time.time()
    shifts = [float(v) - (before + after) / 2 for v in out]
    return min(shifts, key=abs) if all(abs(s) > 1 for s in shifts) else 0.0


@contextlib.contextmanager
def _append(path: Path) -> Iterator[Any]:
    with path.open("ab") as out:
        yield out


_STARTED = re.compile(r"replica (\S+) started(?: http://([\d.]+):(\d+))?")


class ReplicaProcess:
    """One ``python -m qlsched run`` replica; signalled only by its own pid.

    Ownership: the test that starts it stops it (``stop``/``kill``) in a ``finally``.
    """

    def __init__(
        self,
        owner: str,
        dsn: str,
        workdir: Path,
        *,
        lease_ms: int = LEASE_MS,
        cadence_ms: int = CADENCE_MS,
        stop_timeout_ms: int = STOP_TIMEOUT_MS,
        http: bool = False,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.owner = owner
        self.dsn = dsn
        self.workdir = workdir
        self.lease_ms = lease_ms
        self.cadence_ms = cadence_ms
        self.stop_timeout_ms = stop_timeout_ms
        self.http = http
        self.extra_env = dict(extra_env or {})
        self.proc: trio.Process | None = None
        self.http_port: int | None = None
        self.starts = 0
        self.diagnostics_path = workdir / f"{owner}.diagnostics.jsonl"
        self.log_path = workdir / f"{owner}.log"

    def _command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "qlsched",
            "run",
            "--dsn",
            self.dsn,
            "--owner",
            self.owner,
            "--lease-ms",
            str(self.lease_ms),
            "--cadence-ms",
            str(self.cadence_ms),
            "--stop-timeout-ms",
            str(self.stop_timeout_ms),
            "--diagnostics",
            str(self.diagnostics_path),
        ]
        if self.http:
            cmd += ["--http", "127.0.0.1:0"]
        return cmd

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
        # The role's idle-in-transaction timeout (SHORT_TIMEOUTS) is 1 s; the config's
        # declared value must be below the 3 s lease too.
        env["QLSCHED_IDLE_IN_TRANSACTION_TIMEOUT_MS"] = "1000"
        env.update(self.extra_env)
        return env

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, *, timeout_s: float = 60.0) -> None:
        """Start and wait for the "replica ... started" line (readiness and recovery done)."""
        assert self.proc is None or self.proc.returncode is not None
        self.starts += 1
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with _append(self.log_path) as log:
            self.proc = await trio.lowlevel.open_process(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=str(REPO_ROOT),
                env=self._env(),
            )
        with trio.fail_after(timeout_s):
            while True:
                text = self.log_path.read_bytes()[offset:].decode(errors="replace")
                match = _STARTED.search(text)
                if match is not None:
                    self.http_port = int(match.group(3)) if match.group(3) else None
                    return
                if self.proc.poll() is not None:
                    raise RuntimeError(f"replica {self.owner} exited at start: {text[-2000:]}")
                await trio.sleep(0.05)

    def send(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> int | None:
        """SIGTERM (SIGCONT first, in case it is stopped); SIGKILL if it outlasts its
        deadline by 10 s. Returns the exit code (None if it was not running)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(self.stop_timeout_ms / 1000 + 10):
                await proc.wait()
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        return proc.returncode

    def diagnostics(self) -> list[dict[str, Any]]:
        if not self.diagnostics_path.exists():
            return []
        lines = self.diagnostics_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


@contextlib.asynccontextmanager
async def running_replicas(replicas: list[ReplicaProcess]) -> AsyncIterator[list[ReplicaProcess]]:
    """Start all (concurrently), stop all on exit, whatever happened."""
    try:
        async with trio.open_nursery() as nursery:
            for r in replicas:
                nursery.start_soon(r.start)
        yield replicas
    finally:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for r in replicas:
                    nursery.start_soon(r.stop)


async def scrape_metrics(port: int) -> dict[str, float]:
    """The replica's /metrics as {series: value}: ``name{labels}`` keys, labels sorted as
    in the exposition, without the ``profile="cluster"`` every series carries."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        chunks = []
        while chunk := await stream.receive_some(65536):
            chunks.append(chunk)
    body = b"".join(chunks).partition(b"\r\n\r\n")[2].decode(errors="replace")
    out: dict[str, float] = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[without_profile(name, "cluster")] = float(value)
    return out
