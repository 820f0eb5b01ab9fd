"""Bad input to the database commands, as operators type it: an empty ``--dsn``, a string
that is not a postgresql:// URI, one that urllib cannot split, a port that is no port.

Each is bad input: exit 2 and exactly one stderr line ``qlsched COMMAND: ...``, never a
traceback, never the DSN or its password echoed, nothing on stdout; and an empty ``--dsn``
never means "use the embedded database". None of these reaches a server, so no PostgreSQL
is needed (except the embedded one the pinned ``status`` bug below would start).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.schema_support import run_cli

PUBLISH_FILE = str(Path(__file__).resolve().parents[2] / "examples" / "triggers.toml")

COMMANDS: dict[str, list[str]] = {
    "init-db": ["init-db", "--database", "qlbad_never_created"],
    "check": ["check"],
    "migrate": ["migrate"],
    "publish": ["publish", PUBLISH_FILE],
    "status": ["status"],
    "run": ["run"],
}

BAD_DSNS: dict[str, str] = {
    "not-a-uri": "notadsn",
    "key-value-malformed": "host=/nonexistent user=postgres password=hunter2 junk",
    "key-value-unknown-keyword": "host=/nonexistent password=hunter2 hostaddr=127.0.0.1",
    "unclosed-ipv6-bracket": "postgresql://postgres:hunter2@[::1/postgres",
    "port-not-a-number": "postgresql://postgres:hunter2@127.0.0.1:abc/postgres",
    "malformed-query": "postgresql://postgres:hunter2@127.0.0.1/postgres?sslmode",
    "bad-sslmode": "postgresql://postgres:hunter2@127.0.0.1/postgres?sslmode=bogus",
}


def assert_bad_input(command: str, argv: list[str]) -> None:
    result = run_cli(argv, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"qlsched {command}: "), lines[0]
    assert "hunter2" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("case", list(BAD_DSNS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_dsn_that_cannot_be_parsed_is_bad_input(command: str, case: str) -> None:
    """Rule: a DSN that our parser or the driver's rejects is exit 2 and one line, for
    every command that takes --dsn."""
    assert_bad_input(command, [*COMMANDS[command], "--dsn", BAD_DSNS[case]])


@pytest.mark.parametrize("command", ["init-db", "check", "migrate", "publish", "run"])
def test_an_empty_dsn_is_bad_input(command: str) -> None:
    """Rule: `--dsn ""` (an unset shell variable) is exit 2 and one line; it never starts
    the embedded database."""
    assert_bad_input(command, [*COMMANDS[command], "--dsn", ""])


@pytest.mark.parametrize("command", ["check", "publish", "run"])
def test_an_empty_dsn_from_the_environment_is_bad_input(command: str) -> None:
    """Rule: QLSCHED_DSN set to the empty string is bad input too (config validation)."""
    result = run_cli(COMMANDS[command], env={"QLSCHED_DSN": ""}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr
        == f"qlsched {command}: dsn: must not be empty (from environment QLSCHED_DSN)\n"
    )


# Well-formed enough for the driver's parser, which then tries to connect: only our own
# check (dsn.check_dsn, before connecting) finds them.
BAD_PORTS: dict[str, str] = {
    "port-out-of-range": "postgresql://postgres:hunter2@127.0.0.1:99999/postgres",
    "query-port-not-a-number": "postgresql://postgres:hunter2@127.0.0.1/postgres?port=abc",
}


@pytest.mark.parametrize("case", list(BAD_PORTS))
@pytest.mark.parametrize("command", ["init-db", "check"])
def test_a_bad_port_is_bad_input(command: str, case: str) -> None:
    """Rule: a port that is not a number 1..65535 is found before connecting (exit 2)."""
    assert_bad_input(command, [*COMMANDS[command], "--dsn", BAD_PORTS[case]])


@pytest.mark.parametrize("case", list(BAD_PORTS))
@pytest.mark.parametrize("command", ["migrate", "publish", "status", "run"])
def test_a_bad_port_is_bad_input_everywhere(command: str, case: str) -> None:
    assert_bad_input(command, [*COMMANDS[command], "--dsn", BAD_PORTS[case]])


def test_status_with_an_empty_dsn_is_bad_input(tmp_path: Path) -> None:
    # --data-dir keeps the embedded database the bug starts out of the default location.
    assert_bad_input("status", ["status", "--dsn", "", "--data-dir", str(tmp_path / "pg")])
