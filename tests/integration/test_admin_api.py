"""``qlsched.admin`` (docs/contract.md §10): the admin commands from Python, async under
Trio and synchronous for plain scripts, with the TOML path's validation.

The sync functions run ``trio.run`` themselves, so the tests call them from a worker
thread (``trio.to_thread``), as a script's main thread would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from qlsched import admin
from qlsched.admin import (
    AlreadyPaused,
    NotPaused,
    Paused,
    ProjectEntry,
    Resumed,
    SpecError,
    TaskEntry,
    TriggerEntry,
    UnknownTrigger,
    sync,
)
from qlsched.core.control import ControlError
from qlsched.core.specs import decode_publish_file
from qlsched.postgres.login import WrongRole
from tests.integration.schema_support import clean_env
from tests.support.pg import TestDatabase

PROJECTS = [ProjectEntry(id="billing")]
TASKS = [TaskEntry(project="billing", id="invoice", command="make invoices")]
TRIGGERS = [
    TriggerEntry(project="billing", id="nightly", task="invoice", cron="0 3 * * *"),
    TriggerEntry(project="billing", id="hourly", task="invoice", cron="0 * * * *"),
]


async def test_the_async_api_publishes_pauses_resumes_and_lists(pg_db: TestDatabase) -> None:
    """Rule: from a Trio task, publish takes Structs built in code (the same twice is a
    no-op), pause and resume act and say when there was nothing to do, and list_schedules
    shows each schedule's revision, cursor, pause state with note, counts and actions."""
    dsn = pg_db.admin_dsn
    first = await admin.publish(dsn, projects=PROJECTS, tasks=TASKS, triggers=TRIGGERS)
    assert first.triggers == {"billing/nightly": "added", "billing/hourly": "added"}
    again = await admin.publish(dsn, projects=PROJECTS, tasks=TASKS, triggers=TRIGGERS)
    assert set(again.triggers.values()) == {"unchanged"}

    paused = await admin.pause(dsn, "billing/nightly", note="ledger migration", actor="alice")
    assert isinstance(paused, Paused)
    assert isinstance(await admin.pause(dsn, "billing/nightly"), AlreadyPaused)
    assert isinstance(await admin.resume(dsn, "billing/hourly"), NotPaused)

    states = {s.trigger_id: s for s in await admin.list_schedules(pg_db.observer_dsn)}
    nightly, hourly = states["nightly"], states["hourly"]
    assert (nightly.paused, nightly.pause_note, nightly.active) == (True, "ledger migration", False)
    assert (nightly.trigger_revision, nightly.cron, nightly.paused_total) == (1, "0 3 * * *", 0)
    assert [(a.kind, a.actor_label) for a in nightly.actions] == [("pause", "alice")]
    assert (hourly.paused, hourly.active, hourly.actions) == (False, True, [])

    resumed = await admin.resume(dsn, "billing/nightly", catch_up="fire_once")
    assert isinstance(resumed, Resumed)
    page = await admin.list_schedules(dsn, limit=1)
    assert [s.trigger_id for s in page] == ["hourly"]
    rest = await admin.list_schedules(dsn, after=f"billing/{page[0].trigger_id}")
    assert [(s.trigger_id, s.paused, [a.kind for a in s.actions]) for s in rest] == [
        ("nightly", False, ["resume", "pause"])
    ]


async def test_the_sync_api_works_from_a_plain_thread(pg_db: TestDatabase) -> None:
    """Rule: qlsched.admin.sync runs each call to completion without an event loop of the
    caller's: publish, pause, list and resume from a thread with no Trio running."""
    dsn = pg_db.admin_dsn

    def script() -> tuple[object, ...]:
        published = sync.publish(dsn, projects=PROJECTS, tasks=TASKS, triggers=TRIGGERS)
        paused = sync.pause(dsn, "billing/hourly", note="n")
        listed = sync.list_schedules(dsn)
        resumed = sync.resume(dsn, "billing/hourly")
        return published, paused, listed, resumed

    published, paused, listed, resumed = await trio.to_thread.run_sync(script)
    assert set(published.triggers.values()) == {"added"}  # type: ignore[attr-defined]
    assert isinstance(paused, Paused)
    assert [s.paused for s in listed] == [True, False]  # type: ignore[attr-defined]
    assert isinstance(resumed, Resumed)


async def test_an_invalid_struct_fails_as_the_toml_path_fails_it(
    pg_db: TestDatabase, tmp_path: Path
) -> None:
    """Rule: Structs built in code are validated by the TOML path's own converter: a bad
    cron, an id outside the pattern, a grace or a jitter out of bounds (a jitter not below
    the trigger's shortest period too) or a value of the wrong type raise SpecError with
    the very text the same entry in a file gives, and nothing is published."""
    cases = [
        (
            TriggerEntry(project="billing", id="x", task="invoice", cron="0 25 * * *"),
            'cron = "0 25 * * *"',
        ),
        (
            TriggerEntry(project="billing", id="Bad", task="invoice", cron="* * * * *"),
            'cron = "* * * * *"',
        ),
        (
            TriggerEntry(
                project="billing",
                id="x",
                task="invoice",
                cron="* * * * *",
                misfire_grace_ms=86_400_001,
            ),
            'cron = "* * * * *"\nmisfire_grace_ms = 86400001',
        ),
        (
            TriggerEntry(
                project="billing",
                id="x",
                task="invoice",
                cron="* * * * *",
                misfire="later",  # type: ignore[arg-type]
            ),
            'cron = "* * * * *"\nmisfire = "later"',
        ),
        (
            TriggerEntry(
                project="billing", id="x", task="invoice", cron="* * * * *", jitter_ms=60_000
            ),
            'cron = "* * * * *"\njitter_ms = 60000',
        ),
        (
            TriggerEntry(project="billing", id="x", task="invoice", cron="0 0 * * *", jitter_ms=-1),
            'cron = "0 0 * * *"\njitter_ms = -1',
        ),
    ]
    for entry, fields in cases:
        toml = (
            '[[projects]]\nid = "billing"\n[[tasks]]\nproject = "billing"\nid = "invoice"\n'
            f'command = "make invoices"\n[[triggers]]\nproject = "billing"\nid = "{entry.id}"\n'
            f'task = "invoice"\n{fields}\n'
        )
        with pytest.raises(SpecError) as from_file:
            decode_publish_file(toml.encode())
        with pytest.raises(SpecError) as from_code:
            await admin.publish(pg_db.admin_dsn, projects=PROJECTS, tasks=TASKS, triggers=[entry])
        assert str(from_code.value) == str(from_file.value)
    assert await admin.list_schedules(pg_db.admin_dsn) == []
    with pytest.raises(SpecError, match="nothing to publish"):
        await admin.publish(pg_db.admin_dsn)


async def test_bad_input_and_wrong_roles_are_typed_errors(pg_db: TestDatabase) -> None:
    """Rule: an unknown trigger is UnknownTrigger, a malformed reference, a too-long note
    or an unknown catch-up is ControlError (all before or without any change), and a DSN of
    the wrong role is WrongRole naming the role needed."""
    dsn = pg_db.admin_dsn
    await admin.publish(dsn, projects=PROJECTS, tasks=TASKS, triggers=TRIGGERS)
    with pytest.raises(UnknownTrigger, match="no trigger billing/weekly"):
        await admin.pause(dsn, "billing/weekly")
    with pytest.raises(ControlError, match="is not PROJECT/TRIGGER"):
        await admin.pause(dsn, "billing")
    with pytest.raises(ControlError, match="note: longer than 1000"):
        await admin.pause(dsn, "billing/nightly", note="x" * 1001)
    with pytest.raises(ControlError, match="catch_up"):
        await admin.resume(dsn, "billing/nightly", catch_up="all")  # type: ignore[arg-type]
    with pytest.raises(WrongRole, match="pause needs qlsched_admin"):
        await admin.pause(pg_db.observer_dsn, "billing/nightly")
    with pytest.raises(WrongRole, match="needs qlsched_admin or qlsched_observer"):
        await admin.list_schedules(pg_db.runtime_dsn)
    assert all(not s.actions for s in await admin.list_schedules(dsn))


def test_the_schedule_in_code_example_publishes_and_pauses(pg_db: TestDatabase) -> None:
    """Rule: examples/schedule_in_code.py publishes its schedule (a second run changes
    nothing) and, with --pause, pauses and resumes a trigger through the sync API."""
    example = Path(__file__).resolve().parents[2] / "examples" / "schedule_in_code.py"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(example), pg_db.admin_dsn, *args],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
            check=False,
        )

    first, second = run(), run("--pause")
    assert first.returncode == 0, first.stderr
    assert "reports/daily-report-berlin: added" in first.stdout
    assert "reports/cache-warm-us: added" in first.stdout
    assert second.returncode == 0, second.stderr
    assert "added" not in second.stdout
    assert "Paused(" in second.stdout
    assert "Resumed(" in second.stdout
    assert "reports/daily-report-berlin: paused=False actions=['resume', 'pause']" in (
        second.stdout
    )
