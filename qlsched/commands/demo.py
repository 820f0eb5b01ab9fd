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
   while it holds claims (see ``kill_one``): those claims stay locked until their lease
   expires, then a survivor takes them over.
5. After ``--seconds``, the survivors are stopped in order (SIGTERM, then SIGKILL only past
   their stop deadline plus slack, which is reported), and ``verify_exactly_once`` audits
   the database.
6. A worker (``qlsched work``'s service) runs every queued Run's command. Exit 0 only if
   the audit holds (0 duplicates, 0 lost, every Run well-formed) and every Run succeeded.

Ownership: every process the demo starts is its own, tracked by pid and reaped before it
returns; a guardian process (``qlsched.tools.fleet``) SIGKILLs the replicas and removes their
directory should the demo itself be killed. SIGINT/SIGTERM kill the replicas at once, drop
the ``--dsn`` database, stop the embedded server (its context manager) and exit 130/143.
Nothing is left behind.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import trio

from qlsched.commands._common import BAD_INPUT, FAILED, fail
from qlsched.core.specs import PublishFile, decode_publish_file
from qlsched.embedded import open_embedded
from qlsched.postgres.dsn import redact
from qlsched.postgres.errors import DatabaseUnavailable
from qlsched.postgres.initdb import init_db
from qlsched.postgres.pool import Connection, connect_once, open_database
from qlsched.postgres.publish import publish
from qlsched.postgres.timeouts import RoleTimeouts
from qlsched.signals import Interrupted, run_until_signal, single_leaf
from qlsched.tools.demo.jobs import jobs_lines, run_jobs
from qlsched.tools.demo.kill import kill_one, stop_survivors
from qlsched.tools.demo.monitor import Screen, Window, follow, monitor, read
from qlsched.tools.demo.plan import (
    CLEANUP_S,
    EMBEDDED_LEASE_MS,
    EMBEDDED_TIMEOUTS,
    HUNT_SHARE,
    KILL_AT,
    MAX_REPLICAS,
    MAX_SECONDS,
    MIN_REPLICAS,
    MIN_SECONDS,
    SERVER_LEASE_MS,
    START_TIMEOUT_S,
    Plan,
    Target,
    triggers_source,
)
from qlsched.tools.demo.replicas import DemoFleet
from qlsched.tools.demo.summary import summary
from qlsched.tools.demo.text import wrap
from qlsched.tools.fleet import ReplicaFailed, wait_started
from qlsched.tools.verify import (
    VerifyReport,
    drop_database,
    read_schedule_states,
    runs_by_owner,
    verify_exactly_once,
)


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
        for line in wrap(
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
        await wait_started(fleet.replicas, START_TIMEOUT_S)
        slowest = plan.cadence_of(min(plan.replicas, 5) - 1)
        for line in wrap(
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
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_one, w, kill_at, give_up)
                await monitor(w, end)
                nursery.cancel_scope.cancel()  # a kill still hunting at the end is moot
        finally:
            screen.done()
        stop_problems = await stop_survivors(fleet, plan, screen)
        w.observe(await read(db, read_schedule_states))
        w.runs = await read(db, runs_by_owner)
        await follow(w)

        async def verify(conn: Connection) -> VerifyReport:
            return await verify_exactly_once(conn, first_cursors=w.first_cursors)

        verified = await read(db, verify)
        print("running the queued Runs' jobs with a worker ...", flush=True)
        jobs = await run_jobs(dsns["qlsched_worker"], db)
    for line in summary(w, verified, stop_problems, source, len(spec.triggers)):
        print(line, flush=True)
    for line in jobs_lines(jobs):
        print(line, flush=True)
    done = jobs.by_state.get("succeeded", 0) == sum(jobs.by_state.values())
    return 0 if verified.ok and done else 1


def _password_hint() -> str:
    return (
        "if the qlsched roles already have passwords on this server, give them in "
        "QLSCHED_ADMIN_PASSWORD, QLSCHED_RUNTIME_PASSWORD and QLSCHED_OBSERVER_PASSWORD"
    )


async def _run(target: Target, plan: Plan, fleet: DemoFleet) -> int:
    """The Trio program: the demo under a SIGINT/SIGTERM watch, and its clean-up."""
    # Like Python's own Ctrl-C handling, respect a SIGINT ignored by whoever started us
    # (nohup, a background job of a script).
    watched = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        watched.append(signal.SIGINT)

    async def work() -> int:
        try:
            return await _demo(target, plan, fleet)
        finally:
            # Interrupted or failed: the replicas die now (SIGKILL, by pid) and the
            # fleet reaps them on exit. Stopped in order already: nothing to do.
            fleet.kill_all()
            if target.drop_after:
                with trio.move_on_after(CLEANUP_S, shield=True):
                    await _drop(target)

    try:
        return await run_until_signal(work, *watched)
    except BaseExceptionGroup as group:
        raise single_leaf(group) from None
    except Interrupted as stop:
        print(f"qlsched demo: {stop}: replicas killed, nothing left behind", file=sys.stderr)
        return 128 + stop.signum


async def _drop(target: Target) -> None:
    async def fn(conn: Connection) -> None:
        await drop_database(conn, target.database)

    await connect_once(target.superuser_dsn, fn)
    print(f"dropped database {target.database}", flush=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", type=int, default=3, help="replica processes (default 3)")
    p.add_argument("--seconds", type=int, default=30, help="how long to run (default 30)")
    p.add_argument("--dsn", help="a superuser DSN to use instead of the embedded database")
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the embedded database")


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
        except (*FAILED, ReplicaFailed) as exc:
            return fail("demo", str(exc), 1)
