"""The ceiling: the per-occurrence pair (claim one row, admit it alone) under pgbench.

Same server, same run, same rows as the burst drain (N triggers due at one past instant),
the replicas' own claim and admit statements (``qlsched/tools/pgbench/pair.sql``,
rendered from the named blocks), prepared, as the runtime role, with the replicas' pool
settings (``PGOPTIONS``: generic plans, no sequential scans), on up to 2 threads, for a
fixed time, at the replicas' concurrency: one client per replica (in a drain a replica has
one statement in flight at a time) and two per replica; the ceiling is the better of the two
(``--quick``: one per replica only). Each admitted row is due again at once (its next cursor
is 1 ms after the occurrence), so the supply never runs out. Serialization failures are retried by
pgbench (``--max-tries``); a retry re-runs the pair, so the row claimed first is left to its
lease (5 s here, so the supply stays whole). The figure is pgbench's tps: pairs per second.

The batch ceiling is the limit the drain should approach: the same statements as a
replica's round (``qlsched/tools/pgbench/batch.sql``: claim up to the claim budget k, then
one batch admit of those rows) at one client per replica, with the same pool settings. Its
figure is the Runs it admitted per second (counted in the database), and the drain's ratio
to it is what the Python/Trio layer leaves on the table.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import trio

from qlsched.postgres.dsn import password_of, user_of, with_credentials
from qlsched.postgres.pool import Connection
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS
from qlsched.tools import bench_data
from qlsched.tools.bench.drain import LARGEST_GRACE_MS, YEARLY, last_new_year_ms
from qlsched.tools.bench.results import BatchCeiling, CeilingResult, PgbenchRun
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench_data import RowState

SCRIPT = "pair"
BATCH_SCRIPT = "batch"
OWNER = "bench-pgbench"
LEASE_MS = 5_000
MAX_TRIES = 10
GSET_COLUMNS = frozenset(
    {
        "project_id",
        "trigger_id",
        "trigger_revision",
        "state_version",
        "claim_token",
        "claim_version",
        "next_fire_at_ms",
        "content_digest",
        "task_revision",
        "execution_revision_id",
        "locator",
    }
)
"""The claim's columns the admit reads (set by ``\\gset``)."""
BATCH_COLUMNS = frozenset(
    {
        "project_ids",
        "trigger_ids",
        "claim_tokens",
        "claim_versions",
        "state_versions",
        "trigger_revisions",
        "content_digests",
        "task_revisions",
        "execution_revision_ids",
        "fires",
        "nexts",
        "coalesced",
        "run_ids",
        "attempt_ids",
        "idempotency_keys",
        "locators",
    }
)
"""The arrays the batch admit reads (set by ``\\gset`` from ``bench_claim_arrays``)."""
_FIGURES = {
    "tps": re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M),
    "transactions": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "retried": re.compile(r"^number of transactions retried: (\d+)", re.M),
    "retries": re.compile(r"^total number of retries: (\d+)", re.M),
}


class CeilingFailed(RuntimeError):
    """pgbench did not run to the end; the message has its output's tail."""


async def ceiling(session: BenchSession, drain_rate: float | None) -> CeilingResult:
    """pgbench at each client count of ``options.pgbench_clients`` on freshly loaded rows;
    the ceiling is the best of them (the pair's own best, so the ratio is not flattered)."""
    o = session.options
    script = bench_data.render_pgbench(bench_data.pgbench_template(SCRIPT))
    unknown = bench_data.pgbench_variables(script) - GSET_COLUMNS - {"owner", "lease_ms"}
    if unknown:
        raise CeilingFailed(f"pgbench script reads undefined variables: {sorted(unknown)}")
    path = session.workdir / f"{SCRIPT}.sql"
    path.write_text(script, encoding="utf-8")
    runs = [await _pgbench(session, path, clients) for clients in o.pgbench_clients]
    batch = await batch_ceiling(session, drain_rate)
    best = max(runs, key=lambda r: r.pairs_per_s)
    pair_ratio = None if not drain_rate or not best.pairs_per_s else drain_rate / best.pairs_per_s
    session.note(
        f"ceiling: best {best.pairs_per_s:,.0f} pairs/s ({best.clients} clients); burst drain "
        "/ ceiling = " + ("n/a" if pair_ratio is None else f"{pair_ratio:.2f}x")
    )
    return CeilingResult(
        pair_occurrences_per_s=best.pairs_per_s,
        ratio=None if pair_ratio is None else round(pair_ratio, 2),
        clients=best.clients,
        threads=best.threads,
        seconds=o.ceiling_seconds,
        transactions=best.transactions,
        failed=best.failed,
        retried=best.retried,
        retries=best.retries,
        ssi_retry_ratio=best.ssi_retry_ratio,
        runs=runs,
        batch=batch,
    )


async def batch_ceiling(session: BenchSession, drain_rate: float | None) -> BatchCeiling:
    """The replicas' round (claim k, batch admit k) under pgbench, one client per replica."""
    o = session.options
    k = o.replica.claim_budget
    script = bench_data.render_pgbench(bench_data.pgbench_template(BATCH_SCRIPT))
    unknown = bench_data.pgbench_variables(script) - BATCH_COLUMNS - {"owner", "lease_ms", "k"}
    if unknown:
        raise CeilingFailed(f"pgbench script reads undefined variables: {sorted(unknown)}")
    path = session.workdir / f"{BATCH_SCRIPT}.sql"
    path.write_text(script, encoding="utf-8")
    run = await _pgbench(session, path, o.replicas, extra=[f"--define=k={k}"])
    admitted = await session.call(_all_runs)
    rate = admitted / o.ceiling_seconds
    ratio = None if not drain_rate or not rate else drain_rate / rate
    session.note(
        f"ceiling: batch of {k}: {rate:,.0f} occurrences/s ({run.pairs_per_s:,.1f} rounds/s); "
        "burst drain / batch ceiling = " + ("n/a" if ratio is None else f"{ratio:.2f}x")
    )
    return BatchCeiling(
        occurrences_per_s=round(rate, 1),
        rounds_per_s=run.pairs_per_s,
        k=k,
        clients=run.clients,
        admitted=admitted,
        ratio=None if ratio is None else round(ratio, 2),
        failed=run.failed,
        retries=run.retries,
        ssi_retry_ratio=run.ssi_retry_ratio,
    )


async def _all_runs(conn: Connection) -> int:
    return await bench_data.run_count(conn, -(2**62), 2**62)


def pool_options() -> str:
    """libpq's PGOPTIONS for pgbench: the server settings the replicas' claim and admit
    pools run with (both statements share one pgbench connection), so the ceiling runs the
    same plans as the replicas."""
    settings = dict(CLAIM_SETTINGS)
    for name, value in ADMIT_SETTINGS.items():
        if settings.setdefault(name, value) != value:
            raise CeilingFailed(f"the claim and admit pools disagree on {name}")
    return " ".join(f"-c {name}={value}" for name, value in sorted(settings.items()))


async def _pgbench(
    session: BenchSession, script: Path, clients: int, *, extra: list[str] | None = None
) -> PgbenchRun:
    o = session.options
    n = o.triggers
    threads = min(2, clients)
    session.note(f"ceiling: loading {n:,} triggers due at one instant")

    async def load(conn: Connection) -> None:
        await bench_data.reset(conn)
        now = await bench_data.now_ms(conn)
        await bench_data.load_triggers(
            conn, n, crons=[YEARLY], misfire="fire_once", grace_ms=LARGEST_GRACE_MS, now_ms=now
        )
        due = RowState(due_pct=100, due_at_ms=last_new_year_ms(now), later_ms=now)
        await bench_data.load_schedules(conn, n, due, now_ms=now)
        await bench_data.vacuum(conn)

    await session.call(load)
    user = user_of(session.runtime_dsn) or "qlsched_runtime"
    # The password goes through the environment, not argv (readable by any local user).
    dsn = with_credentials(session.runtime_dsn, user=user)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    password = password_of(session.runtime_dsn)
    if password is not None:
        env["PGPASSWORD"] = password
    env["PGAPPNAME"] = "qlsched-bench-pgbench"
    env["PGOPTIONS"] = pool_options()
    argv = [
        str(session.pgbench),
        "--no-vacuum",
        "--protocol=prepared",
        f"--client={clients}",
        f"--jobs={threads}",
        f"--time={o.ceiling_seconds}",
        f"--max-tries={MAX_TRIES}",
        f"--define=owner={OWNER}",
        f"--define=lease_ms={LEASE_MS}",
        f"--file={script}",
        *(extra or []),
        dsn,
    ]
    session.note(f"ceiling: pgbench, {clients} clients, {threads} threads, {o.ceiling_seconds} s")
    result = await trio.run_process(
        argv, capture_stdout=True, capture_stderr=True, env=env, check=False
    )
    out = result.stdout.decode(errors="replace")
    figures: dict[str, float] = {}
    for name, pattern in _FIGURES.items():
        match = pattern.search(out)
        if match is not None:
            figures[name] = float(match.group(1))
    if result.returncode != 0 or "tps" not in figures:
        tail = "\n".join((out + result.stderr.decode(errors="replace")).splitlines()[-12:])
        raise CeilingFailed(f"pgbench exited with code {result.returncode}:\n{tail}")
    transactions = int(figures.get("transactions", 0))
    retries = int(figures.get("retries", 0))
    failed = int(figures.get("failed", 0))
    statements = transactions + retries + failed
    run = PgbenchRun(
        clients=clients,
        threads=threads,
        pairs_per_s=round(figures["tps"], 1),
        transactions=transactions,
        failed=failed,
        retried=int(figures.get("retried", 0)),
        retries=retries,
        ssi_retry_ratio=retries / statements if statements else None,
    )
    unit = "pairs/s" if script.stem == SCRIPT else "rounds/s"
    session.note(f"ceiling: {run.pairs_per_s:,.0f} {unit} at {clients} clients ({retries} retries)")
    return run
