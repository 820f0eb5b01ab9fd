"""Where pauses show (docs/contract.md §7, §10): ``status`` (text and ``--json``),
``/v1/schedules`` and ``/metrics`` of a real replica. Each shows a paused trigger as
paused with its note, ``paused_total``, and its latest actions (at most three, newest
first); metrics count actions by kind and paused occurrences, database-wide, read from the
database at each scrape (actions are taken by admin processes, not replicas)."""

from __future__ import annotations

import json

from qlsched.admin import pause, resume
from qlsched.cluster.root import open_cluster_control
from qlsched.core.control import Resumed
from qlsched.core.cron import iter_after, parse_cron
from tests.integration.cluster_support import (
    PROJECT,
    control_config,
    http_get,
    open_superuser,
    publish_triggers,
    trigger,
    wait_until,
)
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase

HOURLY = "0 * * * *"
ACTIONS = 'qlsched_schedule_actions_total{{kind="{}",profile="cluster"}} {}.0'
"""A control action count's line in ``/metrics`` (``.format(kind, count)``)."""


async def _history(db: TestDatabase) -> int:
    """Trigger a paused three times (hours of hourly occurrences inside the last pause),
    b never: returns a's paused_total."""
    await publish_triggers(db, [trigger("a", cron=HOURLY), trigger("b")])
    paused_total = 0
    async with open_superuser(db) as su:
        for i in range(3):
            await pause(db.admin_dsn, f"{PROJECT}/a", note=f"pause {i}", actor="ops")
            now = await su.now_ms()
            cursor = next(iter_after(parse_cron(HOURLY), now - 5 * 3_600_000))
            await su.execute(
                "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $1 WHERE trigger_id = 'a'",
                cursor,
            )
            outcome = await resume(db.admin_dsn, f"{PROJECT}/a")
            assert isinstance(outcome, Resumed)
            paused_total += outcome.paused
    await pause(db.admin_dsn, f"{PROJECT}/a", note="disk full", actor="alice")
    return paused_total


async def test_status_shows_the_pause_its_note_the_total_and_the_last_actions(
    pg_db: TestDatabase,
) -> None:
    """Rule: status --json gives each schedule paused_at_ms, pause_note, paused_total and
    its last three actions newest first (kind, role, --actor label, time); the text marks
    the trigger paused and prints one control line for it, none for an untouched one."""
    paused_total = await _history(pg_db)
    assert paused_total >= 3 * 4

    result = run_cli(["status", "--json", "--dsn", pg_db.observer_dsn])

    assert result.returncode == 0, result.stderr
    rows = {r["trigger_id"]: r for r in json.loads(result.stdout)["schedules"]}
    a, b = rows["a"], rows["b"]
    assert a["paused_at_ms"] is not None
    assert (a["pause_note"], a["paused_total"]) == ("disk full", paused_total)
    assert [(x["kind"], x["actor"], x["actor_label"]) for x in a["actions"]] == [
        ("pause", "qlsched_admin", "alice"),
        ("resume", "qlsched_admin", None),
        ("pause", "qlsched_admin", "ops"),
    ]
    assert (b["paused_at_ms"], b["paused_total"], b["actions"]) == (None, 0, [])
    text = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert text.returncode == 0, text.stderr
    assert f"{PROJECT}/a (paused)" in text.stdout
    lines = [line for line in text.stdout.splitlines() if line.startswith(f"  {PROJECT}/")]
    assert len(lines) == 1, text.stdout
    assert "paused since" in lines[0]
    assert "(disk full)" in lines[0]
    assert f"paused_total {paused_total}" in lines[0]
    assert "last actions: pause" in lines[0]
    assert "by qlsched_admin (alice)" in lines[0]


async def test_a_replica_serves_pauses_on_v1_schedules_and_counts_them_in_metrics(
    pg_db: TestDatabase,
) -> None:
    """Rule: /v1/schedules shows the paused state, note, paused_total and last actions;
    /metrics counts actions by kind (qlsched_schedule_actions_total) and paused occurrences
    (qlsched_paused_total) as the database holds them, updated at the first scrape after the
    cached one (``METRICS_TTL_S``). A later page (``?cursor=``) carries the same pause state
    as the first."""
    paused_total = await _history(pg_db)
    config = control_config(pg_db.runtime_dsn, "r", http="127.0.0.1:0")
    async with open_cluster_control(config) as control:
        assert control.http_address is not None
        port = control.http_address[1]

        listing = await http_get(port, "/v1/schedules")
        metrics = await http_get(port, "/metrics")
        await resume(pg_db.admin_dsn, f"{PROJECT}/a")

        async def resumed_counted() -> bool:
            # A scrape is served again for METRICS_TTL_S: the count shows once it expires.
            later = await http_get(port, "/metrics")
            return ACTIONS.format("resume", 4) in later.body.decode()

        await wait_until(resumed_counted, what="the resume in /metrics")
        # A page after the first (keyset: the rows after a) shows pause state too.
        await pause(pg_db.admin_dsn, f"{PROJECT}/b", note="b too")
        after_a = await http_get(port, f"/v1/schedules?cursor={PROJECT}/a")

    [b] = json.loads(after_a.body)["schedules"]
    assert (b["trigger_id"], b["pause_note"]) == ("b", "b too")
    assert [x["kind"] for x in b["actions"]] == ["pause"]

    assert listing.status == 200
    rows = {r["trigger_id"]: r for r in json.loads(listing.body)["schedules"]}
    assert (rows["a"]["pause_note"], rows["a"]["paused_total"]) == ("disk full", paused_total)
    assert rows["a"]["paused_at_ms"] is not None
    assert rows["a"]["active"] is False
    assert [x["kind"] for x in rows["a"]["actions"]] == ["pause", "resume", "pause"]
    assert rows["b"]["actions"] == []
    text = metrics.body.decode()
    assert ACTIONS.format("pause", 4) in text
    assert ACTIONS.format("resume", 3) in text
    assert f'qlsched_paused_total{{profile="cluster"}} {float(paused_total)}' in text
