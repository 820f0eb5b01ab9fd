"""``qlsched bench``: the project's benchmark (``qlsched.tools.bench``), with the pgbench ceiling.

Where it runs: with no ``--dsn``, an ephemeral embedded PostgreSQL (its own settings, stopped
and removed at the end); with a superuser ``--dsn``, a fresh database
``qlsched_bench_<random>`` on that server, dropped at the end (the server's cluster-wide
``qlsched_*`` roles are created when missing, as ``init-db`` does; their passwords come from
``QLSCHED_<ROLE>_PASSWORD`` when they already have one). Never point it at a database in
use: it only ever touches the one it creates.

Output: progress lines on stderr; the report on stdout, readable or (``--json``) one JSON
object. Exit 0 when exactly once held in every replica phase (a missed speed target is
reported, not an error), 1 when it did not or the bench could not run, 2 for bad flags,
130/143 on SIGINT/SIGTERM (replicas killed, database dropped, server stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import msgspec
import trio

from qlsched.commands._common import BAD_INPUT, FAILED, fail
from qlsched.embedded import EmbeddedError, find_bindir, open_embedded
from qlsched.postgres.dsn import password_of, redact, user_of, with_credentials
from qlsched.postgres.initdb import init_db
from qlsched.postgres.pool import Connection, connect_once
from qlsched.signals import Interrupted, run_until_signal, single_leaf
from qlsched.tools.bench.ceiling import CeilingFailed
from qlsched.tools.bench.machine import machine
from qlsched.tools.bench.render import render
from qlsched.tools.bench.replicas import Fleet
from qlsched.tools.bench.results import BenchReport
from qlsched.tools.bench.retention import FLOOR_HISTORY, retention_lines
from qlsched.tools.bench.retention_results import RetentionCost
from qlsched.tools.bench.runner import Target, run_bench, run_retention_bench, run_sweep_bench
from qlsched.tools.bench.session import BenchOptions, options_for
from qlsched.tools.bench.sweep import SweepReport, draw_sweep, parse_counts, render_sweep
from qlsched.tools.fleet import ReplicaFailed
from qlsched.tools.verify import drop_database

MAX_TRIGGERS = 1_000_000
MAX_REPLICAS = 32
MAX_SECONDS = 3_600
EMBEDDED_SETTINGS = {"shared_buffers": "256MB", "max_wal_size": "2GB"}
"""The embedded server's settings beyond qlsched.embedded's own: room for the 1M-row tables
in memory, and no checkpoint storm in the middle of a bulk load."""
CLEANUP_S = 30.0
MIN_RETENTION_HISTORY = FLOOR_HISTORY
MAX_RETENTION_HISTORY = 100_000_000


def _pgbench(explicit_bindir: str | None, server_bindir: Path | None) -> Path | None:
    """pgbench: next to the server's binaries, else the named or packaged ones, else PATH."""
    candidates: list[Path] = []
    if server_bindir is not None:
        candidates.append(server_bindir / "pgbench")
    with contextlib.suppress(EmbeddedError):
        candidates.append(find_bindir(explicit_bindir) / "pgbench")
    found = shutil.which("pgbench")
    if found:
        candidates.append(Path(found))
    return next((c for c in candidates if c.is_file()), None)


async def _bench(
    superuser_dsn: str,
    database: str,
    *,
    want_passwords: bool | None,
    embedded: bool,
    pgbench: Path,
    options: BenchOptions,
    fleet: Fleet,
    workdir: Path,
    sweep_counts: list[int] | None = None,
) -> BenchReport | SweepReport | RetentionCost:
    async def work() -> BenchReport | SweepReport | RetentionCost:
        initialised = await init_db(superuser_dsn, database=database, want_passwords=want_passwords)
        runtime = next(r.dsn for r in initialised.roles if r.role == "qlsched_runtime")
        observer = next(r.dsn for r in initialised.roles if r.role == "qlsched_observer")
        worker = next(r.dsn for r in initialised.roles if r.role == "qlsched_worker")
        target = Target(
            superuser_dsn=with_credentials(
                superuser_dsn,
                user=user_of(superuser_dsn) or "postgres",
                password=password_of(superuser_dsn),
                database=database,
            ),
            runtime_dsn=runtime,
            observer_dsn=observer,
            worker_dsn=worker,
            embedded=embedded,
            pgbench=pgbench,
        )
        if sweep_counts is not None:
            return await run_sweep_bench(
                target, options, sweep_counts, fleet=fleet, workdir=workdir
            )
        if options.retention_only:
            return await run_retention_bench(target, options, fleet=fleet, workdir=workdir)
        return await run_bench(target, options, fleet=fleet, workdir=workdir)

    return await run_until_signal(work, signal.SIGTERM)


async def _drop(superuser_dsn: str, database: str) -> None:
    async def fn(conn: Connection) -> None:
        await drop_database(conn, database)

    await connect_once(superuser_dsn, fn)


def _check(args: argparse.Namespace) -> str | None:
    if not 1 <= args.triggers <= MAX_TRIGGERS:
        return f"--triggers {args.triggers}: must be 1..{MAX_TRIGGERS:,}"
    if not 1 <= args.replicas <= MAX_REPLICAS:
        return f"--replicas {args.replicas}: must be 1..{MAX_REPLICAS}"
    if not 1 <= args.seconds <= MAX_SECONDS:
        return f"--seconds {args.seconds}: must be 1..{MAX_SECONDS}"
    history = args.retention_history
    if history is not None and not MIN_RETENTION_HISTORY <= history <= MAX_RETENTION_HISTORY:
        return (
            f"--retention-history {history}: must be"
            f" {MIN_RETENTION_HISTORY:,}..{MAX_RETENTION_HISTORY:,}"
        )
    return None


def plot_command(plot_dir: str | None, from_json: str | None) -> int | None:
    """Checks before a run (None: go on and run the bench), or the whole of
    ``--plot DIR --from-json FILE`` (its exit code). The charts module is imported only
    here: matplotlib is an optional extra."""
    from qlsched.tools.bench.plot import INSTALL, ChartInput, draw, have_matplotlib

    if plot_dir is None:
        return fail("bench", "--from-json needs --plot DIR", 2)
    if not have_matplotlib():
        return fail("bench", INSTALL, 2)
    if from_json is None:
        return None
    try:
        data = msgspec.json.decode(Path(from_json).read_bytes(), type=ChartInput)
    except OSError as exc:
        return fail("bench", f"--from-json {from_json}: {exc.strerror or exc}", 2)
    except msgspec.DecodeError as exc:
        return fail("bench", f"--from-json {from_json}: not a bench report ({exc})", 2)
    for path in draw(data, Path(plot_dir)):
        print(path)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--triggers",
        type=int,
        default=10_000,
        help="triggers in the drain, ceiling and steady phases (default 10000)",
    )
    p.add_argument("--replicas", type=int, default=2, help="replica processes (default 2)")
    p.add_argument(
        "--seconds", type=int, default=20, help="length of the steady phase (default 20)"
    )
    p.add_argument("--dsn", help="superuser DSN (default: an embedded database)")
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the embedded database")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--edge", action="store_true", help="the Edge profile's figures beside the cluster's"
    )
    p.add_argument("--cluster-json", help="with --edge: the cluster figures from this bench JSON")
    p.add_argument("--no-cluster", action="store_true", help="with --edge: no cluster figures")
    p.add_argument(
        "--scale",
        action="store_true",
        help="also a 1,000,000-trigger burst and 100,000 triggers steady (several minutes)",
    )
    p.add_argument(
        "--plot", metavar="DIR", help="write charts (PNG) to DIR (needs the bench extra)"
    )
    p.add_argument(
        "--from-json", metavar="FILE", help="with --plot: chart a saved --json report, no run"
    )
    p.add_argument(
        "--retention-history",
        type=int,
        metavar="N",
        help="finished Runs the retention phase prunes over (default 1000000, 50000 with"
        " --quick; the figure to run once is 10000000)",
    )
    p.add_argument(
        "--retention-only",
        action="store_true",
        help="only the retention phase: a prune batch over N finished Runs against the floor",
    )
    p.add_argument(
        "--sweep",
        metavar="R,R,...",
        help="only the burst drain and its ceiling at each replica count, e.g. 1,2,4,8,16",
    )


def main(args: argparse.Namespace) -> int:
    if args.edge:
        from qlsched.tools.bench.edge import main as edge_main

        return edge_main(args)
    if args.plot is not None or args.from_json is not None:
        status = plot_command(args.plot, args.from_json)
        if status is not None:
            return status
    problem = _check(args)
    if problem is not None:
        return fail("bench", problem, 2)
    sweep_counts = _sweep_counts(args.sweep)
    if isinstance(sweep_counts, str):
        return fail("bench", sweep_counts, 2)
    options = options_for(
        triggers=args.triggers,
        replicas=args.replicas,
        seconds=args.seconds,
        quick=args.quick,
        scale=args.scale,
        retention_history=args.retention_history,
        retention_only=args.retention_only,
    )
    drop: tuple[str, str] | None = None
    try:
        with contextlib.ExitStack() as stack:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="qlsched-bench-"))
            )
            if args.dsn:
                superuser_dsn, embedded = args.dsn, False
                database = f"qlsched_bench_{secrets.token_hex(4)}"
                want_passwords: bool | None = None
                server_bindir: Path | None = None
                print(
                    f"qlsched bench: server {redact(args.dsn)}, a fresh database {database}",
                    file=sys.stderr,
                    flush=True,
                )
                drop = (superuser_dsn, database)
            else:
                print("qlsched bench: starting an ephemeral embedded PostgreSQL", file=sys.stderr)
                server = stack.enter_context(
                    open_embedded(bindir=args.pg_bindir, settings=EMBEDDED_SETTINGS)
                )
                superuser_dsn, embedded = server.dsn(), True
                database, want_passwords, server_bindir = "qlsched_bench", False, server.bindir
            pgbench = _pgbench(args.pg_bindir, server_bindir)
            if pgbench is None:
                return fail("bench", "pgbench not found: pass --pg-bindir DIR (pg_config --bindir)")
            fleet = stack.enter_context(Fleet(workdir))
            report = trio.run(
                lambda: _bench(
                    superuser_dsn,
                    database,
                    want_passwords=want_passwords,
                    embedded=embedded,
                    pgbench=pgbench,
                    options=options,
                    fleet=fleet,
                    workdir=workdir,
                    sweep_counts=sweep_counts,
                )
            )
    except BaseExceptionGroup as group:
        leaf = single_leaf(group)
        return _failure(leaf, group)
    except (Exception, KeyboardInterrupt) as exc:
        return _failure(exc, exc)
    finally:
        if drop is not None:
            _drop_quietly(*drop)
    if isinstance(report, SweepReport):
        return _sweep_output(report, args)
    if isinstance(report, RetentionCost):
        return _retention_output(report, args)
    return _report_output(report, args)


def _sweep_counts(text: str | None) -> list[int] | str | None:
    """``--sweep N,N,...``: the replica counts, a problem line (exit 2), or None."""
    if text is None:
        return None
    parsed = parse_counts(text)
    if isinstance(parsed, str):
        return parsed
    if parsed[-1] > MAX_REPLICAS:
        return f"--sweep: at most {MAX_REPLICAS} replicas"
    return parsed


def _report_output(report: BenchReport, args: argparse.Namespace) -> int:
    """Print the report (JSON or text), draw the charts if asked; exit 1 unless exactly
    once held."""
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        print(render(report))
    sys.stdout.flush()
    if args.plot is not None:
        from qlsched.tools.bench.plot import write_charts

        write_charts(report, Path(args.plot))
    return 0 if report.exactly_once else 1


def _sweep_output(report: SweepReport, args: argparse.Namespace) -> int:
    """The sweep's table (or ``--json``), and its curve with ``--plot DIR``."""
    facts = machine()
    if args.json:
        doc = {"machine": msgspec.to_builtins(facts), "sweep": msgspec.to_builtins(report)}
        sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
    else:
        print(render_sweep(report, f"{facts.cpu_count} CPUs, {facts.cpu_model}"))
    sys.stdout.flush()
    if args.plot is not None:
        print(f"qlsched bench: chart {draw_sweep(report, args.plot)}", file=sys.stderr)
    return 0 if report.exactly_once else 1


def _retention_output(report: RetentionCost, args: argparse.Namespace) -> int:
    """``--retention-only``: the phase's figures (or ``--json``); exit 1 unless exact."""
    if args.json:
        doc = {"machine": msgspec.to_builtins(machine()), "retention": msgspec.to_builtins(report)}
        sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
    else:
        print("\n".join(retention_lines(report)).strip())
    sys.stdout.flush()
    return 0 if report.floor.exact and report.large.exact else 1


def _failure(leaf: BaseException, original: BaseException) -> int:
    if isinstance(leaf, Interrupted):
        print(f"qlsched bench: {leaf}: replicas killed, nothing left behind", file=sys.stderr)
        return 128 + leaf.signum
    if isinstance(leaf, KeyboardInterrupt):
        print("qlsched bench: interrupted: replicas killed, nothing left behind", file=sys.stderr)
        return 130
    if isinstance(leaf, BAD_INPUT):
        return fail("bench", str(leaf), 2)
    if isinstance(leaf, (*FAILED, ReplicaFailed, CeilingFailed)):
        return fail("bench", str(leaf), 1)
    raise original


def _drop_quietly(superuser_dsn: str, database: str) -> None:
    async def fn() -> None:
        with trio.move_on_after(CLEANUP_S):
            await _drop(superuser_dsn, database)

    try:
        trio.run(fn)
    except Exception as exc:
        print(
            f"qlsched bench: could not drop database {database} ({type(exc).__name__}); "
            "drop it by hand",
            file=sys.stderr,
        )
        return
    print(f"qlsched bench: dropped database {database}", file=sys.stderr)
