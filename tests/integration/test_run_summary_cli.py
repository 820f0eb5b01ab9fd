"""``qlsched run --summary SECONDS``: a one-line summary at that interval on stderr."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.integration.cluster_support import open_superuser, publish_triggers, trigger
from tests.integration.schema_support import clean_env, run_cli
from tests.support.pg import TestDatabase

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-m", "qlsched", "run"]
FLAGS = ["--owner", "x", "--lease-ms", "8000", "--stop-timeout-ms", "2000", "--cadence-ms", "100"]
LINE = re.compile(
    r"^qlsched run: last 0\.5s: \d+ rounds, \d+ claimed, (\d+) admitted, \d+ skipped, "
    r"\d+ coalesced, mean lag (?:-|\d+\.\d\ds); (\d+) admitted since start$"
)


async def test_summary_lines_come_at_the_interval_and_count_admits(pg_db: TestDatabase) -> None:
    """Rule: with ``--summary 0.5`` the replica prints a summary line about every half
    second; the admits since start grow to count the Run it admitted."""
    await publish_triggers(pg_db, [trigger("t")])
    async with open_superuser(pg_db) as su:
        await su.make_due(["t"])
    process = await trio.lowlevel.open_process(
        [*RUN, "--dsn", pg_db.runtime_dsn, *FLAGS, "--summary", "0.5"],
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
            while text.count("qlsched run: last") < 4:
                chunk = await process.stderr.receive_some()
                assert chunk, text
                text += chunk.decode()
            process.send_signal(signal.SIGTERM)
            while chunk := await process.stderr.receive_some():
                text += chunk.decode()
            assert await process.wait() == 0, text
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    matches = [LINE.match(line) for line in text.splitlines() if "last 0.5s" in line]
    assert all(matches), text
    assert int(matches[-1].group(2)) >= 1  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_summary_interval_is_bad_input(value: str) -> None:
    """Rule: a summary interval that is not 0..86400 seconds is exit 2 with one line, from
    the flag or from QLSCHED_SUMMARY, before anything connects."""
    flag = run_cli(["run", "--dsn", "postgresql://x@127.0.0.1:1/x", "--summary", value])
    env = run_cli(["run", "--dsn", "postgresql://x@127.0.0.1:1/x"], env={"QLSCHED_SUMMARY": value})
    for result in (flag, env):
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("qlsched run: summary")
