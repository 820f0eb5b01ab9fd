"""The admin API's edges (docs/contract.md §10): every bad input is its typed error
(``SpecError`` for publish, ``ControlError`` for the rest), raised before the database is
touched, never a raw ``UnicodeEncodeError``, driver ``DataError``, ``OverflowError``,
``AttributeError`` or ``TypeError``; a naive datetime is refused, not guessed."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from qlsched import admin
from qlsched.admin import ProjectEntry, SpecError, TaskEntry, TriggerEntry
from qlsched.core.control import ControlError, TriggerRef
from tests.integration.schema_support import clean_env
from tests.support.pg import TestDatabase

PROJECTS = [ProjectEntry(id="billing")]
TRIGGERS = [TriggerEntry(project="billing", id="nightly", task="invoice", cron="0 3 * * *")]


def _tasks(command: str) -> list[TaskEntry]:
    return [TaskEntry(project="billing", id="invoice", command=command)]


async def test_a_surrogate_in_a_publish_is_a_spec_error(pg_db: TestDatabase) -> None:
    """Rule: a lone surrogate in a task's command is SpecError naming the field, and
    nothing is published."""
    with pytest.raises(SpecError, match=r"tasks\[0\]\.command: not UTF-8 text"):
        await admin.publish(
            pg_db.admin_dsn, projects=PROJECTS, tasks=_tasks("run \ud800"), triggers=TRIGGERS
        )
    assert await admin.list_schedules(pg_db.admin_dsn) == []


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("pause", {"trigger": "billing/nightly", "note": "bad \udcff"}, "note: not UTF-8"),
    ("pause", {"trigger": "billing/nightly", "actor": "\ud800"}, "actor: not UTF-8"),
    ("pause", {"trigger": "billing/nightly", "note": 5}, "note: expected text, got int"),
    ("pause", {"trigger": 42}, "must be PROJECT/TRIGGER text, got int"),
    ("pause", {"trigger": TriggerRef("billing", "no such/id")}, "is not PROJECT/TRIGGER"),
    ("resume", {"trigger": None}, "got NoneType"),
    ("trigger_now", {"trigger": b"billing/nightly"}, "got bytes"),
    ("trigger_now", {"trigger": "billing/nightly", "note": "\ud800"}, "note: not UTF-8"),
    ("backfill", {"start": -(10**20), "end": 0}, "start: .* is outside 1970"),
    ("backfill", {"start": 0, "end": 10**20}, "end: .* is outside 1970"),
    ("backfill", {"start": 1.5, "end": 10}, "start: expected an aware datetime .* got float"),
    ("backfill", {"start": datetime(2026, 1, 1), "end": 0}, "start: a datetime without a"),
    ("backfill", {"start": 0, "end": datetime(2026, 1, 2)}, "end: a datetime without a"),
    ("backfill", {"start": 0, "end": 1, "max_occurrences": "9"}, "max: must be 1 to"),
    ("list_schedules", {"limit": "10"}, "limit: expected 1..10000"),
    ("list_schedules", {"recent_actions": 2.5}, "recent_actions: expected 0..100"),
]


@pytest.mark.parametrize(("call", "kwargs", "message"), BAD_CALLS)
async def test_bad_input_is_a_control_error(
    pg_db: TestDatabase, call: str, kwargs: dict[str, Any], message: str
) -> None:
    """Rule: each malformed argument (a surrogate, a wrong type, an out-of-range instant, a
    naive datetime) raises ControlError naming it, and no action is recorded."""
    dsn = pg_db.admin_dsn
    await admin.publish(dsn, projects=PROJECTS, tasks=_tasks("make"), triggers=TRIGGERS)
    if call == "backfill":
        kwargs = {"trigger": "billing/nightly", **kwargs}
    with pytest.raises(ControlError, match=message):
        await getattr(admin, call)(dsn, **kwargs)
    assert all(not s.actions and not s.paused for s in await admin.list_schedules(dsn))


async def test_an_aware_datetime_and_epoch_ms_are_accepted(pg_db: TestDatabase) -> None:
    """Rule: a backfill range given as aware datetimes or as epoch ms is recorded (the
    refusals above are about the form, not the operation)."""
    dsn = pg_db.admin_dsn
    await admin.publish(dsn, projects=PROJECTS, tasks=_tasks("make"), triggers=TRIGGERS)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    first = await admin.backfill(dsn, "billing/nightly", start=start, end=start)
    second = await admin.backfill(dsn, "billing/nightly", start=0, end=86_400_000)
    assert isinstance(first, admin.Recorded), first
    assert isinstance(second, admin.Recorded), second


def test_a_note_that_is_not_utf8_is_one_line_and_exit_2(pg_db: TestDatabase) -> None:
    """Rule: ``pause --note`` with bytes that are not UTF-8 (Python sees lone surrogates)
    is one line on stderr and exit 2, not a driver error."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "qlsched",
            "pause",
            "billing/nightly",
            "--note",
            b"bad \xff",
            "--dsn",
            pg_db.admin_dsn,
        ],
        capture_output=True,
        env=clean_env(None),
        timeout=60,
        check=False,
    )
    err = result.stderr.decode("utf-8", "replace")
    assert (result.returncode, err) == (
        2,
        "qlsched pause: note: not UTF-8 text (a lone surrogate)\n",
    )
