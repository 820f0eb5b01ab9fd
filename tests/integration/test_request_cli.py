"""``qlsched trigger`` and ``qlsched backfill`` as an operator runs them (subprocesses with
the admin DSN), ``status`` showing the requests, and a whole replica admitting them.

Exit codes (docs/contract.md §7): 0 recorded; 1 refused by the trigger's state (disabled,
archived); 2 the request must change (no such trigger, a bad range, too many occurrences,
a role that may not record requests). Every refusal is one line on stderr.
"""

from __future__ import annotations

import json

import trio

from qlsched.cluster.root import open_cluster_control
from qlsched.core.specs import TriggerEntry
from tests.integration.cluster_support import (
    PROJECT,
    control_config,
    open_superuser,
    publish_triggers,
)
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase

DAILY = "0 3 * * *"


def _trigger(trigger_id: str, *, enabled: bool = True) -> TriggerEntry:
    return TriggerEntry(project=PROJECT, id=trigger_id, task="task", cron=DAILY, enabled=enabled)


async def test_trigger_records_or_refuses_with_one_line_and_its_exit_code(
    pg_db: TestDatabase,
) -> None:
    """Rule: `qlsched trigger P/T` records a pending request (exit 0, its id on stdout); a
    disabled trigger is refused with the reason (exit 1), a missing one or a malformed
    target is bad input (exit 2), and an observer DSN is named as the wrong role (exit 2)."""
    await publish_triggers(pg_db, [_trigger("a"), _trigger("off", enabled=False)])
    admin = ["--dsn", pg_db.admin_dsn]
    ok = run_cli(["trigger", f"{PROJECT}/a", "--note", "after restore", "--actor", "kim", *admin])
    assert ok.returncode == 0, ok.stderr
    assert f"trigger {PROJECT}/a: request " in ok.stdout
    off = run_cli(["trigger", f"{PROJECT}/off", *admin])
    assert (off.returncode, off.stderr.strip()) == (
        1,
        f"qlsched trigger: {PROJECT}/off: refused: the trigger is disabled",
    )
    missing = run_cli(["trigger", f"{PROJECT}/nope", *admin])
    assert missing.returncode == 2
    assert f"no trigger {PROJECT}/nope" in missing.stderr
    assert run_cli(["trigger", "nope"]).returncode == 2
    wrong = run_cli(["trigger", f"{PROJECT}/a", "--dsn", pg_db.observer_dsn])
    assert wrong.returncode == 2
    assert "needs qlsched_admin" in wrong.stderr
    for r in (off, missing, wrong):
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


async def test_backfill_counts_up_front_and_status_shows_its_progress(
    pg_db: TestDatabase,
) -> None:
    """Rule: `qlsched backfill` counts the range's occurrences before writing anything:
    above --max it is refused with the count (exit 2); within it, recorded with the count;
    a range whose start is after its end or a date that is not ISO 8601 is bad input.
    `status` shows the request and its progress (done/total, admitted, already admitted)."""
    await publish_triggers(pg_db, [_trigger("a")])
    admin = ["--dsn", pg_db.admin_dsn]
    span = ["--from", "2026-01-01", "--to", "2026-01-30T23:59:59Z"]
    big = run_cli(["backfill", f"{PROJECT}/a", *span, "--max", "10", *admin])
    assert big.returncode == 2
    assert "the range holds 30 occurrences, more than --max 10" in big.stderr
    ok = run_cli(["backfill", f"{PROJECT}/a", *span, *admin])
    assert ok.returncode == 0, ok.stderr
    assert "recorded for 30 occurrences" in ok.stdout
    # Bad input is named before anything connects (no DSN given: no local server starts).
    backwards = run_cli(["backfill", f"{PROJECT}/a", "--from", "2026-02-01", "--to", "2026-01-01"])
    assert backwards.returncode == 2
    assert "start is after its end" in backwards.stderr
    assert (
        run_cli(["backfill", f"{PROJECT}/a", "--from", "soon", "--to", "2026-01-01"]).returncode
        == 2
    )
    assert run_cli(["backfill", f"{PROJECT}/a", *span, "--max", "1000001", *admin]).returncode == 2
    status = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert status.returncode == 0, status.stderr
    assert (
        f"request backfill {PROJECT}/a pending 0/30 (admitted 0, already admitted 0)"
        in status.stdout
    )
    report = json.loads(run_cli(["status", "--json", "--dsn", pg_db.observer_dsn]).stdout)
    [request] = report["requests"]
    assert (request["kind"], request["total"], request["state"]) == ("backfill", 30, "pending")


async def test_a_running_replica_admits_a_trigger_now_request(pg_db: TestDatabase) -> None:
    """Rule: a replica started by `open_cluster_control` serves requests in its rounds: a
    recorded trigger-now request becomes its one Run and the request is done."""
    await publish_triggers(pg_db, [_trigger("a")])
    async with open_cluster_control(control_config(pg_db.runtime_dsn, "r1")):
        ok = await trio.to_thread.run_sync(
            run_cli, ["trigger", f"{PROJECT}/a", "--dsn", pg_db.admin_dsn]
        )
        assert ok.returncode == 0, ok.stderr
        async with open_superuser(pg_db) as su:
            with trio.fail_after(20):
                while True:
                    state = await su.fetchval("SELECT state FROM qlsched.control_requests")
                    if state == "done":
                        break
                    await trio.sleep(0.05)
            keys = await su.fetch("SELECT idempotency_key, admitted_by_owner FROM qlsched.runs")
    assert [(k["idempotency_key"].split(":")[1], k["admitted_by_owner"]) for k in keys] == [
        ("manual", "r1")
    ]
