"""Where a downstream dispatcher starts: queued Runs and their pristine Attempts.

    python examples/dispatcher.py OBSERVER_DSN [--limit N] [--follow SECONDS]

qlsched's work ends at a queued Run: for each occurrence exactly one Run (``state =
'queued'``), with one pristine Attempt (``claimed``, ``remote_worker``, every worker/session/
lease/offer/callback/start/result/error field NULL) that names the pinned execution
revision, whose payload is what a worker will run. Placement - choosing a worker, offering
the Attempt, tracking it - is the dispatcher's, and begins where this script prints "->".

``qlsched work`` is the dispatcher qlsched ships (docs/contract.md §13): it claims these Runs
as ``qlsched_worker`` and runs them. A dispatcher of your own that must read the payload
runs as that role too and claims through the same protocol (``qlsched.worker``): the
worker reads a payload only through ``qlsched.worker_payloads``, for Runs queued or running.
Do not grant any role more (the payload column, say): readiness checks the grants exactly,
so ``qlsched check`` reports the extra grant and ``qlsched run`` refuses to start.

This example only reads, as ``qlsched_observer`` (SELECT only), so it can run against a live
cluster. The observer reads no secret: not the payload and not the Attempt's callback token
(``qlsched.attempts_redacted`` says whether one is set). The table and column names it
uses are a contract (docs/contract.md §4). Its SQL is inline because it is an example; inside the
package, SQL lives in ``qlsched/postgres/sql/``.

Deduplicate on the idempotency key, ``ql3:cron:v1:<trigger>:<revision>:<scheduled_for_ms>``.
Within one database history there is one Run per occurrence; after an *asynchronous*
failover the new primary may admit an occurrence again under the same key and
``scheduled_for`` (docs/contract.md §8), and a dispatcher that restarts re-reads Runs it has already
handed out. Keep the keys you dispatched (durably, with a UNIQUE constraint, in a real
dispatcher) together with the project, since the key does not name it, and skip repeats.

Plain asyncio + asyncpg on purpose: a dispatcher needs nothing of qlsched but its schema.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys

import asyncpg

# The queued Runs whose latest Attempt is still pristine and not marked for recovery, with
# the execution revision they pin, oldest first, after the keyset cursor ($1, $2).
QUEUED_RUNS = """
SELECT r.run_id, r.project_id, r.trigger_id, r.scheduled_for_ms, r.queued_at_ms,
       r.idempotency_key, r.admitted_by_owner, a.attempt_id, a.attempt_no,
       e.execution_revision_id, e.executor_kind, e.digest
  FROM qlsched.runs AS r
  JOIN qlsched.attempts_redacted AS a ON a.run_id = r.run_id
  JOIN qlsched.execution_revisions AS e ON e.execution_revision_id = r.execution_revision_id
 WHERE r.state = 'queued' AND NOT r.cancel_requested AND r.queued_at_ms IS NOT NULL
   AND a.attempt_no = (SELECT max(x.attempt_no) FROM qlsched.attempts AS x
                        WHERE x.run_id = r.run_id)
   AND a.state = 'claimed' AND a.executor_kind = 'remote_worker'
   AND a.worker_id IS NULL AND a.session_id IS NULL AND a.lease_id IS NULL
   AND a.offer_id IS NULL AND NOT a.has_callback_token AND a.started_at_ms IS NULL
   AND a.result IS NULL AND a.error IS NULL
   AND NOT EXISTS (SELECT 1 FROM qlsched.recovery_marks AS m WHERE m.attempt_id = a.attempt_id)
   AND (r.queued_at_ms, r.run_id) > ($1::bigint, $2::uuid)
 ORDER BY r.queued_at_ms, r.run_id
 LIMIT $3
"""

START = (0, "00000000-0000-0000-0000-000000000000")


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


async def dispatch(dsn: str, limit: int, follow_s: float) -> int:
    conn = await asyncpg.connect(dsn)
    seen: set[tuple[str, str]] = set()  # (project, idempotency key): in memory, for the demo
    cursor: tuple[int, object] = START
    shown = 0
    loop = asyncio.get_running_loop()
    until = loop.time() + follow_s
    try:
        while True:
            rows = await conn.fetch(QUEUED_RUNS, cursor[0], cursor[1], limit - shown)
            for row in rows:
                cursor = (row["queued_at_ms"], row["run_id"])
                key = (row["project_id"], row["idempotency_key"])
                if key in seen:
                    print(f"duplicate key {row['idempotency_key']}: already dispatched, skipped")
                    continue
                seen.add(key)
                shown += 1
                lag = row["queued_at_ms"] - row["scheduled_for_ms"]
                print(
                    f"queued run {row['run_id']} {row['project_id']}/{row['trigger_id']} "
                    f"for {iso(row['scheduled_for_ms'])} (queued {lag} ms later by "
                    f"{row['admitted_by_owner']})\n"
                    f"  key {row['idempotency_key']}\n"
                    f"  attempt {row['attempt_no']} {row['attempt_id']}: pristine, "
                    f"{row['executor_kind']}"
                )
                # The worker fetches the payload by execution revision and, failing closed as
                # admission does, runs it only if its SHA-256 is this digest.
                print(
                    "  -> placement would offer this attempt to a worker: execution revision "
                    f"{row['execution_revision_id']} (payload sha256 {row['digest']})"
                )
            if shown >= limit or loop.time() >= until:
                break
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    print(f"{shown} queued runs listed")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dsn", help="the qlsched_observer role's DSN (read-only)")
    parser.add_argument("--limit", type=int, default=20, help="list at most N runs (20)")
    parser.add_argument("--follow", type=float, default=0.0, help="keep polling for N seconds")
    args = parser.parse_args()
    try:
        return asyncio.run(dispatch(args.dsn, args.limit, args.follow))
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"dispatcher: {type(exc).__name__}: cannot read the queue", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
