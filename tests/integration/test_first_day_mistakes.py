"""A new user's mistakes, each as the user makes it: a subprocess against real PostgreSQL.

Every row is one mistake from the first-day report. Each must end in exactly one stderr line
``qlsched COMMAND: ...`` that says what is wrong (the role it logged in as and the role it
needs, the database's name, why the DSN is invalid), with exit 1 (failed or not ready) or
2 (bad input), and never a traceback. A superuser replica is not a mistake that stops it:
it warns once and runs.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import asyncpg
import msgspec
import pytest
import trio

from qlsched.commands._common import run_command
from tests.integration.schema_support import clean_env, empty_database, execute, run_cli
from tests.support.pg import PgCluster, TestDatabase

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = str(REPO / "examples" / "triggers.toml")
RUN_FLAGS: Final = ["--owner", "x", "--lease-ms", "8000", "--stop-timeout-ms", "2000"]


class Mistake(msgspec.Struct, frozen=True):
    argv: list[str]
    code: int
    line: str
    """The whole stderr line expected, after ``qlsched COMMAND: ``."""


@pytest.fixture
def bare_db(pg_cluster: PgCluster) -> Iterator[str]:
    """A database on the same server with no qlsched schema (the roles exist: cluster-wide)."""
    with empty_database(pg_cluster) as name:
        yield name


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def empty_file(tmp_path: Path) -> str:
    path = tmp_path / "empty.toml"
    path.write_text("# nothing yet\n")
    return str(path)


def with_param(dsn: str, param: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + param


def mistakes(db: TestDatabase, bare_db: str, busy_port: int, empty_file: str) -> dict[str, Mistake]:
    cluster = db.cluster
    bare_observer = cluster.dsn(bare_db, "qlsched_observer")
    return {
        "publish-as-runtime": Mistake(
            ["publish", EXAMPLE, "--dsn", db.runtime_dsn],
            2,
            "this DSN logs in as qlsched_runtime; publish needs qlsched_admin",
        ),
        "publish-as-observer": Mistake(
            ["publish", EXAMPLE, "--dsn", db.observer_dsn],
            2,
            "this DSN logs in as qlsched_observer; publish needs qlsched_admin",
        ),
        "run-as-observer": Mistake(
            ["run", "--dsn", db.observer_dsn, *RUN_FLAGS],
            2,
            "this DSN logs in as qlsched_observer; run needs qlsched_runtime",
        ),
        "run-as-admin": Mistake(
            ["run", "--dsn", db.admin_dsn, *RUN_FLAGS],
            2,
            "this DSN logs in as qlsched_admin; run needs qlsched_runtime",
        ),
        "migrate-as-admin": Mistake(
            ["migrate", "--dsn", db.admin_dsn],
            2,
            "this DSN logs in as qlsched_admin; migrate needs a superuser or a member of "
            "qlsched_owner",
        ),
        "status-as-admin": Mistake(
            ["status", "--dsn", db.admin_dsn],
            2,
            "this DSN logs in as qlsched_admin; status needs qlsched_observer",
        ),
        "status-without-schema": Mistake(
            ["status", "--dsn", bare_observer],
            1,
            f"database {bare_db} is not initialised: run qlsched init-db",
        ),
        "publish-without-schema": Mistake(
            ["publish", EXAMPLE, "--dsn", cluster.dsn(bare_db, "qlsched_admin")],
            1,
            f"database {bare_db} is not initialised: run qlsched init-db",
        ),
        "run-without-schema": Mistake(
            ["run", "--dsn", cluster.dsn(bare_db, "qlsched_runtime"), *RUN_FLAGS],
            1,
            f"database {bare_db} is not initialised: run qlsched init-db",
        ),
        "run-http-port-in-use": Mistake(
            ["run", "--dsn", db.runtime_dsn, "--http", f"127.0.0.1:{busy_port}", *RUN_FLAGS],
            1,
            f"cannot listen on 127.0.0.1:{busy_port}: the address is already in use "
            "(another replica or service?)",
        ),
        "publish-empty-file": Mistake(
            ["publish", empty_file, "--dsn", db.admin_dsn],
            2,
            f"{empty_file}: nothing to publish: the file has no [[projects]], [[tasks]] or "
            "[[triggers]] (see examples/triggers.toml)",
        ),
        "database-does-not-exist": Mistake(
            ["status", "--dsn", cluster.dsn("qlsched_no_such_db", "qlsched_observer")],
            1,
            "the database qlsched_no_such_db does not exist",
        ),
        "sslmode-bogus": Mistake(
            [
                "status",
                "--dsn",
                with_param(db.observer_dsn, "sslmode=bogus"),
            ],
            2,
            "the DSN is not valid: sslmode must be one of disable, allow, prefer, require, "
            "verify-ca, verify-full",
        ),
        "driver-refuses-a-parameter": Mistake(
            ["status", "--dsn", with_param(db.observer_dsn, "target_session_attrs=bogus")],
            2,
            "the DSN is not valid: the driver refuses its target_session_attrs parameter",
        ),
    }


MISTAKES: Final = [
    "publish-as-runtime",
    "publish-as-observer",
    "run-as-observer",
    "run-as-admin",
    "migrate-as-admin",
    "status-as-admin",
    "status-without-schema",
    "publish-without-schema",
    "run-without-schema",
    "run-http-port-in-use",
    "publish-empty-file",
    "database-does-not-exist",
    "sslmode-bogus",
    "driver-refuses-a-parameter",
]


@pytest.mark.parametrize("case", MISTAKES)
def test_every_first_day_mistake_is_one_line_with_its_exit_code(
    pg_db: TestDatabase, bare_db: str, busy_port: int, empty_file: str, case: str
) -> None:
    """Rule: each mistake on the list exits 1 or 2 with exactly one stderr line that says
    what is wrong; no traceback, nothing on stdout, nothing published or scheduled."""
    mistake = mistakes(pg_db, bare_db, busy_port, empty_file)[case]
    result = run_cli(mistake.argv, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr == f"qlsched {mistake.argv[0]}: {mistake.line}\n"
    assert result.returncode == mistake.code
    assert result.stdout == ""


def test_the_sweep_names_every_row() -> None:
    """Rule: the sweep's list is the report's list: a row is never dropped silently."""
    assert len(MISTAKES) == len(set(MISTAKES)) == 14


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            asyncpg.InsufficientPrivilegeError("permission denied for table runs: secret"),
            "permission denied: this DSN's role may not do this (see docs/contract.md §4) "
            "(SQLSTATE 42501)",
        ),
        (
            asyncpg.UndefinedTableError('relation "qlsched.runs" does not exist'),
            "a qlsched table is missing: is the database initialised (qlsched init-db)? "
            "(SQLSTATE 42P01)",
        ),
        (
            asyncpg.DivisionByZeroError("secret row data"),
            "the server refused the command (DivisionByZeroError, SQLSTATE 22012)",
        ),
    ],
    ids=["permission", "undefined-table", "other"],
)
def test_a_server_error_the_checks_missed_is_still_one_line(
    error: asyncpg.PostgresError, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: the commands' last resort: a server error that no check named first is one
    line by SQLSTATE, exit 1, never the driver's message (it can echo row data)."""

    async def body() -> int:
        raise error

    assert run_command("status", body) == 1
    assert capsys.readouterr().err == f"qlsched status: {line}\n"


async def test_a_superuser_replica_warns_once_and_runs(pg_db: TestDatabase) -> None:
    """Rule: ``run`` with a superuser DSN is not refused (a superuser may do everything the
    runtime role may) but says so once, naming the role to use, before it starts."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "qlsched", "run", "--dsn", pg_db.superuser_dsn, *RUN_FLAGS],
        cwd=REPO,
        env=clean_env(None),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    text = ""
    try:
        with trio.fail_after(30):
            while "started" not in text:
                chunk = await process.stderr.receive_some()
                if not chunk:
                    break
                text += chunk.decode()
            process.send_signal(signal.SIGTERM)
            while chunk := await process.stderr.receive_some():
                text += chunk.decode()
            returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert returncode == 0, text
    assert "Traceback" not in text
    superuser = pg_db.cluster.superuser
    warnings = [line for line in text.splitlines() if "warning" in line]
    assert warnings == [
        f"qlsched run: warning: this DSN logs in as superuser {superuser}; "
        "a replica should log in as qlsched_runtime"
    ]


def test_a_schema_with_many_findings_is_one_short_line(pg_db: TestDatabase) -> None:
    """Rule: ``run`` on a schema readiness refuses for several reasons prints the first
    finding and how many more ``check`` lists, on one line, exit 1; ``check`` lists each."""
    execute(
        pg_db.superuser_dsn,
        "DELETE FROM qlsched.capability",
        "GRANT SELECT ON qlsched.runs TO qlsched_admin",
        "GRANT SELECT ON qlsched.attempts TO qlsched_admin",
    )
    result = run_cli(["run", "--dsn", pg_db.runtime_dsn, *RUN_FLAGS], timeout=60)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("qlsched run: ")]
    assert len(lines) == 1, result.stderr
    assert re.fullmatch(
        r"qlsched run: schema not ready: [^;]+ \(and 2 more: run qlsched check\)", lines[0]
    ), lines[0]
    check = run_cli(["check", "--dsn", pg_db.runtime_dsn], timeout=60)
    assert check.returncode == 1
    assert len(check.stdout.splitlines()) == 3, check.stdout
