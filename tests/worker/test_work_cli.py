"""``qlsched work``'s bad input: one line on stderr, exit 2, before any job runs."""

from __future__ import annotations

import pytest

from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--concurrency", "0"], "--concurrency: 0 is not within 1..256"),
        (["--lease-ms", "5000", "--stop-timeout-ms", "5000"], "must be below --lease-ms"),
        (["--http", "nowhere"], "expected HOST:PORT"),
        (["--task", "nope"], "--task nope: expected PROJECT/TASK"),
        (["--task", "p/b", "--task", "p/B"], "--task p/B: expected PROJECT/TASK"),
    ],
)
def test_bad_flags_exit_2(pg_db: TestDatabase, flags: list[str], message: str) -> None:
    """Rule: a bad flag is named in one line on stderr, exit 2, no traceback."""
    out = run_cli(["work", "--dsn", pg_db.worker_dsn, *flags])
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("qlsched work: ")
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_another_roles_dsn_is_named(pg_db: TestDatabase) -> None:
    """Rule: `work` with the runtime's DSN says which role it logged in as and which it
    needs (exit 2), before claiming anything."""
    out = run_cli(["work", "--dsn", pg_db.runtime_dsn])
    assert out.returncode == 2, out.stderr
    assert "this DSN logs in as qlsched_runtime; work needs qlsched_worker" in out.stderr
