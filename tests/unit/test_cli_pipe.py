"""A reader that goes away (``qlsched ... | head -1``) ends the command without a traceback."""

from __future__ import annotations

import subprocess
import sys


def test_a_closed_pipe_is_no_traceback() -> None:
    """Rule: when stdout's reader closes early, the command stops quietly (exit 1), with
    nothing on stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "qlsched", "next", "* * * * * *", "-n", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        assert process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) == 1
    assert stderr == ""
