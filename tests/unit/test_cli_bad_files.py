"""Bad publish and config files from the command line (issue 15, item 5): each is one
stderr line ``qlsched COMMAND: ...`` and exit 2, found before any connection (the DSN
points at a port where nothing listens), never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOWHERE = "postgresql://qlsched_admin@127.0.0.1:1/qlsched"
PUBLISH_HEAD = (
    '[[projects]]\nid = "p"\n\n[[tasks]]\nproject = "p"\nid = "t"\ncommand = "x"\n\n'
    '[[triggers]]\nproject = "p"\nid = "tr"\ntask = "t"\n'
)
LONG_CRON = ",".join(str(i) for i in range(60)) + " " + ",".join(str(i) for i in range(24))
DEEP = "x = " + "[" * 900 + "]" * 900 + "\n"


def qlsched(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QLSCHED_", "PG"))}
    return subprocess.run(
        [sys.executable, "-m", "qlsched", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], start: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(start), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (PUBLISH_HEAD + f'cron = "{LONG_CRON} * * *"\n', 'triggers[0] (id "tr"): cron: longer'),
        (PUBLISH_HEAD + 'cron = "* * * * *"\ntimezone = "' + "A" * 65 + '"\n', "triggers[0]"),
        (DEEP, "nested deeper than 32 levels"),
        ("x = " + "1" * 5000 + "\n", "not valid TOML: a number has too many digits"),
        (
            PUBLISH_HEAD + 'cron = "30 2 * * *"\ndst_gap = "later"\n',
            "triggers[0] (id \"tr\"): dst_gap: 'later' is not one of shift, skip",
        ),
        (
            PUBLISH_HEAD + 'cron = "30 2 * * *"\ndst_fold = "twice"\n',
            "triggers[0] (id \"tr\"): dst_fold: 'twice' is not one of first, last, both",
        ),
        (
            PUBLISH_HEAD + 'cron = "0 0 * * *"\njitter_ms = 3600001\n',
            'triggers[0] (id "tr"): jitter_ms: Expected `int` <= 3600000',
        ),
        (
            PUBLISH_HEAD + 'cron = "*/5 * * * *"\njitter_ms = 300000\n',
            'triggers[0] (id "tr"): jitter_ms: 300000 is not below the trigger\'s shortest'
            " period between occurrences, 300000 ms (5 min)",
        ),
        (
            PUBLISH_HEAD + 'cron = "* * * * *"\noverlap = "sometimes"\n',
            "triggers[0] (id \"tr\"): overlap: 'sometimes' is not one of allow, skip,"
            " buffer_one, cancel_other",
        ),
        (
            PUBLISH_HEAD + 'cron = "* * * * *"\nstart_deadline_ms = 0\n',
            'triggers[0] (id "tr"): start_deadline_ms: Expected `int` >= 1',
        ),
    ],
    ids=[
        "cron-237-chars",
        "timezone-65-chars",
        "nested-900",
        "huge-integer",
        "dst-gap",
        "dst-fold",
        "jitter-over-an-hour",
        "jitter-not-below-the-period",
        "overlap-unknown",
        "start-deadline-zero",
    ],
)
def test_a_bad_publish_file_is_one_line(tmp_path: Path, content: str, problem: str) -> None:
    """Rule: a publish file that passes the cron parser but not the database's limits,
    or that would exhaust the parser (deep nesting, a huge integer), exits 2 with one line
    naming the file and the problem, before connecting."""
    path = tmp_path / "bad.toml"
    path.write_text(content)
    assert_one_line(
        qlsched("publish", str(path), "--dsn", NOWHERE), f"qlsched publish: {path}: {problem}"
    )


@pytest.mark.parametrize("command", ["publish", "check", "run", "status"])
def test_a_deeply_nested_config_file_is_one_line(tmp_path: Path, command: str) -> None:
    """Rule: `--config` naming a file nested 900 deep exits 2 with one line naming the
    file, for every command that reads a config file."""
    config = tmp_path / "config.toml"
    config.write_text(DEEP)
    publish = tmp_path / "ok.toml"
    publish.write_text(PUBLISH_HEAD + 'cron = "* * * * *"\n')
    args = [str(publish)] if command == "publish" else []
    result = qlsched(command, *args, "--config", str(config), "--dsn", NOWHERE)
    assert_one_line(
        result, f"qlsched {command}: config file {config}: nested deeper than 32 levels"
    )


def test_an_oversized_config_file_is_one_line(tmp_path: Path) -> None:
    """Rule: a config file over 1 MiB is refused by size, without parsing it."""
    config = tmp_path / "big.toml"
    config.write_text("# " + "x" * (1024 * 1024) + "\n")
    result = qlsched("check", "--config", str(config), "--dsn", NOWHERE)
    assert_one_line(result, f"qlsched check: config file {config}: larger than 1048576 bytes")
