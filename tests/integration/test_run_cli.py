"""``qlsched run`` as operators run it: a subprocess, signals, exit codes, one-line errors.

The replica is ``python -m qlsched run`` against the test database as the runtime role. Its
stderr is read as it comes (the "started" line, the diagnostics, the "stopping" line).
Expected failures must print one line and exit 1 (cannot run) or 2 (bad configuration,
found before anything connects); a traceback means a bug.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
import trio

from tests.integration.cluster_support import (
    http_get,
    http_status,
    open_superuser,
    publish_triggers,
    trigger,
    wait_until,
)
from tests.support.pg import TestDatabase

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_MS: Final = 2_000
SLACK_S: Final = 3.0
"""Beyond the stop deadline: the interpreter's own exit and the pools' close."""
STARTUP_TIMEOUT_S: Final = 30.0
NOWHERE: Final = "postgresql://qlsched_runtime:s3cret-pw@127.0.0.1:1/qlsched"
"""Nothing listens on port 1: connecting fails at once (and the password must not leak)."""


def _env() -> dict[str, str]:
    """The test's environment without anything that would configure the replica."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("QLSCHED_", "PG"))}


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "qlsched", "run", *args]


def _run_args(dsn: str, *extra: str) -> list[str]:
    return [
        "--dsn",
        dsn,
        "--owner",
        "x",
        "--lease-ms",
        "8000",
        "--stop-timeout-ms",
        str(STOP_TIMEOUT_MS),
        "--cadence-ms",
        "200",
        *extra,
    ]


class Stderr:
    """A subprocess's stderr, pumped as it comes."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self.data = bytearray()
        self._changed = trio.Event()
        self.closed = False

    @property
    def text(self) -> str:
        return self.data.decode(errors="replace")

    async def pump(self) -> None:
        assert self._process.stderr is not None
        while chunk := await self._process.stderr.receive_some():
            self.data += chunk
            self._changed.set()
            self._changed = trio.Event()
        self.closed = True
        self._changed.set()

    async def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        with trio.move_on_after(timeout_s):
            while True:
                match = re.search(pattern, self.text)
                if match is not None:
                    return match
                if self.closed:
                    break
                await self._changed.wait()
        raise AssertionError(f"no {pattern!r} on stderr; got:\n{self.text}")


async def _run_to_exit(args: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
    with trio.fail_after(timeout_s):
        result = await trio.run_process(
            _command(*args),
            cwd=REPO,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.stdout == b""
    return result.returncode, result.stderr.decode(errors="replace")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_run_admits_and_stops_in_order_within_the_deadline(
    pg_db: TestDatabase, signum: signal.Signals
) -> None:
    """Rule: ``qlsched run`` reports "started" once it schedules (``/readyz`` 200, a due
    occurrence admitted under its owner); on SIGTERM or SIGINT it stops in order within
    ``stop_timeout_ms`` plus slack, exits 0, says "stopping" and prints no traceback; its
    listener and its database sessions are gone afterwards."""
    await publish_triggers(pg_db, [trigger("t")])
    async with open_superuser(pg_db) as su:
        scheduled_for = await su.make_due(["t"])
        process = await trio.lowlevel.open_process(
            _command(*_run_args(pg_db.runtime_dsn, "--http", "127.0.0.1:0")),
            cwd=REPO,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        stderr = Stderr(process)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stderr.pump)
                started = await stderr.wait_for(
                    r"replica x started http://127\.0\.0\.1:(\d+)", STARTUP_TIMEOUT_S
                )
                port = int(started.group(1))
                assert (await http_get(port, "/readyz")).status == 200

                async def admitted() -> bool:
                    occ = await su.occurrence("t", scheduled_for)
                    return bool(occ.runs)

                await wait_until(admitted, what="the run replica admitting")
                occ = await su.occurrence("t", scheduled_for)
                assert [r["admitted_by_owner"] for r in occ.runs] == ["x"]

                signalled_at = trio.current_time()
                process.send_signal(signum)
                with trio.fail_after(STOP_TIMEOUT_MS / 1000 + SLACK_S):
                    returncode = await process.wait()
                stopped_in_s = trio.current_time() - signalled_at
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert returncode == 0, stderr.text
        assert stopped_in_s < STOP_TIMEOUT_MS / 1000 + SLACK_S
        text = stderr.text
        assert f"{signum.name}: stopping" in text
        assert "stopped after" in text
        assert "Traceback" not in text
        assert await http_status(port) is None

        async def sessions_gone() -> bool:
            return await su.runtime_backends() == []

        await wait_until(sessions_gone, timeout_s=5, what="the replica's sessions closed")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        pytest.param(
            ["--claim-budget", "0"],
            ["claim_budget", "flag --claim-budget"],
            id="claim-budget-0",
        ),
        pytest.param(
            ["--lease-ms", "1000", "--stop-timeout-ms", "2000"],
            ["lease_ms", "stop_timeout_ms", "flag --lease-ms", "flag --stop-timeout-ms"],
            id="lease-not-above-stop-timeout",
        ),
    ],
)
async def test_bad_config_exits_2_with_one_line_before_connecting(
    args: list[str], names: list[str]
) -> None:
    """Rule: a bad configuration value exits 2 with one line naming the option and where
    it came from, before anything connects (the DSN points where nothing listens: a
    connection attempt would exit 1 instead)."""
    returncode, stderr = await _run_to_exit(["--dsn", NOWHERE, "--owner", "x", *args])
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qlsched run: ")
    for name in names:
        assert name in lines[0]
    assert "s3cret-pw" not in stderr


async def test_unreachable_database_exits_1_with_one_line() -> None:
    """Rule: a database that cannot be reached exits 1 with one line saying so: no
    traceback, no DSN and no password echoed."""
    returncode, stderr = await _run_to_exit(_run_args(NOWHERE))
    assert returncode == 1, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qlsched run: cannot connect")
    assert "s3cret-pw" not in stderr
    assert "127.0.0.1:1" not in stderr


async def test_not_ready_schema_exits_1_naming_the_finding(pg_db: TestDatabase) -> None:
    """Rule: a schema that is not ready exits 1 before scheduling anything: one line names
    the finding (besides it only JSON diagnostics), no traceback, and no claim was taken."""
    await publish_triggers(pg_db, [trigger("t")])
    async with open_superuser(pg_db) as su:
        await su.execute("DELETE FROM qlsched.capability")
        returncode, stderr = await _run_to_exit(_run_args(pg_db.runtime_dsn))
        row = await su.schedule("t")
    assert returncode == 1, stderr
    assert "Traceback" not in stderr
    messages = [line for line in stderr.splitlines() if line.startswith("qlsched run: ")]
    assert messages == [
        "qlsched run: schema not ready: capability qlsched.cluster_scheduler is missing"
    ]
    diagnostics = [json.loads(line) for line in stderr.splitlines() if line not in messages]
    assert [d["code"] for d in diagnostics] == ["schema_not_ready"]
    assert row["claim_version"] == 0
    assert row["claim_token"] is None
