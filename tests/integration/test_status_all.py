"""``qlsched status`` with more triggers than it shows (README "Command line"): the first
1,000, then a line saying there are more and how to see them; ``--all`` shows every one,
read a keyset page at a time; ``--json`` says ``schedules_more``. And ``--config`` is read
as ``run`` and ``check`` read it: a missing file is exit 2, never a silent default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.status import _all_schedules
from tests.integration.cluster_support import PROJECT, publish_triggers, trigger
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase

MORE = "showing the first 1,000 triggers; there are more: `qlsched status --all`"


def _trigger_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"{PROJECT}/")]


async def test_status_says_when_it_shows_only_the_first_1000(pg_db: TestDatabase) -> None:
    """Rule: with 1,001 triggers, ``status`` lists 1,000 and says there are more (naming
    ``--all``), ``--json`` has ``schedules_more: true``; ``status --all`` lists all 1,001 and
    no such line."""
    await publish_triggers(pg_db, [trigger(f"t{i:05d}") for i in range(1001)])
    dsn = ("--dsn", pg_db.observer_dsn)
    first = run_cli(["status", *dsn])
    every = run_cli(["status", "--all", *dsn])
    doc = json.loads(run_cli(["status", "--json", *dsn]).stdout)
    assert (first.returncode, every.returncode) == (0, 0), (first.stderr, every.stderr)
    assert len(_trigger_lines(first.stdout)) == 1000
    assert MORE in first.stdout
    assert len(_trigger_lines(every.stdout)) == 1001
    assert "there are more" not in every.stdout
    assert (len(doc["schedules"]), doc["schedules_more"]) == (1000, True)


async def test_all_pages_by_key(pg_db: TestDatabase) -> None:
    """Rule: the pages of ``--all`` (2 rows each here) hold every row once, in key order."""
    ids = [f"t{i}" for i in range(5)]
    await publish_triggers(pg_db, [trigger(t) for t in ids])

    async def fn(conn: Connection) -> list[str]:
        return [row.trigger_id for row in await _all_schedules(conn, 2)]

    assert await connect_once(pg_db.observer_dsn, fn) == ids


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_missing_config_file_is_exit_2(how: str, tmp_path: Path) -> None:
    """Rule: ``status --config missing.toml`` (or ``QLSCHED_CONFIG``) without a DSN is one
    line naming the file, exit 2, before any local database is looked for, as ``run`` and
    ``check`` report it (it went on to the local database, the file unread)."""
    args = ["status", "--data-dir", str(tmp_path / "pgdata"), "--pg-bindir", str(tmp_path)]
    env: dict[str, str] = {}
    if how == "flag":
        args += ["--config", "missing.toml"]
    else:
        env = {"QLSCHED_CONFIG": "missing.toml"}
    result = run_cli(args, env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("qlsched status: ")
    assert "missing.toml" in result.stderr
    assert len(result.stderr.splitlines()) == 1
