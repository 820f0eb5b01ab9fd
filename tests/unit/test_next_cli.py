"""``qlsched next EXPR [--tz ZONE] [--from ISO] [-n N]`` (docs/contract.md §7).

Expected lines were worked out by hand from the DST rule (see ``test_cron_dst.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from qlsched.cli import main
from qlsched.core.jitter import jitter_offset_ms

NY = ZoneInfo("America/New_York")

REPO = Path(__file__).resolve().parents[2]


def check(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, out: list[str], err: str = ""
) -> None:
    """``qlsched next ARGV`` exits ``code``, prints exactly ``out`` and, on failure, one
    stderr line starting with ``err``."""
    assert main(["next", *argv]) == code
    captured = capsys.readouterr()
    assert captured.out.splitlines() == out
    if err:
        lines = captured.err.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith(err)
        assert "Traceback" not in captured.err
    else:
        assert captured.err == ""


GOOD = [
    pytest.param(
        [
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--from",
            "2026-03-07T12:00:00-05:00",
            "-n",
            "3",
        ],
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"],
        id="gap-moves-fixed-time-to-03:00",
    ),
    pytest.param(
        ["30 2 * * *", "--tz", "America/New_York", "--from", "2026-03-07T12:00", "-n", "1"],
        ["2026-03-08T03:00:00-04:00"],
        id="naive-from-read-in-tz",
    ),
    pytest.param(
        ["30 * * * *", "--tz", "America/New_York", "--from", "2026-11-01T05:00:00Z", "-n", "3"],
        ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"],
        id="fold-wildcard-fires-both",
    ),
    pytest.param(
        ["*/5 * * * * *", "--from", "2026-01-01T00:00:00+00:00", "-n", "3"],
        ["2026-01-01T00:00:05+00:00", "2026-01-01T00:00:10+00:00", "2026-01-01T00:00:15+00:00"],
        id="six-fields-utc-default",
    ),
    pytest.param(
        ["@daily", "--tz", "Asia/Shanghai", "--from", "2026-01-01", "-n", "2"],
        ["2026-01-02T00:00:00+08:00", "2026-01-03T00:00:00+08:00"],
        id="date-only-from-is-midnight-strictly-after",
    ),
    pytest.param(
        [
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--from",
            "2026-03-07T12:00",
            "-n",
            "2",
            "--dst-gap",
            "skip",
        ],
        [
            "# dst_gap = skip, dst_fold = first",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00",
        ],
        id="gap-skip-names-the-policy",
    ),
    pytest.param(
        [
            "30 1 * * *",
            "--tz",
            "America/New_York",
            "--from",
            "2026-10-31T12:00",
            "-n",
            "2",
            "--dst-fold",
            "last",
        ],
        [
            "# dst_gap = shift, dst_fold = last",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:30:00-05:00",
        ],
        id="fold-last",
    ),
    pytest.param(
        [
            "45 1 * * *",
            "--tz",
            "Australia/Lord_Howe",
            "--from",
            "2026-04-04T12:00",
            "-n",
            "3",
            "--dst-fold",
            "both",
            "--dst-gap",
            "skip",
        ],
        [
            "# dst_gap = skip, dst_fold = both",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:45:00+10:30",
            "2026-04-06T01:45:00+10:30",
        ],
        id="lord-howe-fold-both",
    ),
    pytest.param(
        [
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--from",
            "2026-03-07T12:00",
            "-n",
            "1",
            "--dst-gap",
            "shift",
            "--dst-fold",
            "first",
        ],
        ["2026-03-08T03:00:00-04:00"],
        id="default-policy-spelled-out-adds-no-line",
    ),
]


@pytest.mark.parametrize(("argv", "out"), GOOD)
def test_prints_fire_times(
    capsys: pytest.CaptureFixture[str], argv: list[str], out: list[str]
) -> None:
    """N fire times strictly after --from, one per line, ISO 8601 with the zone's offset at
    each instant; a --from without offset is read in --tz; --dst-gap/--dst-fold apply the
    trigger policy, named on a first ``#`` line when it is not the default."""
    check(capsys, argv, 0, out)


BAD = [
    pytest.param(["0 25 * * *"], "qlsched next: hour: 25 is out of range 0-23", id="expression"),
    pytest.param(["0 0 L * *"], "qlsched next: day-of-month: 'L'", id="unsupported"),
    pytest.param(["* * * *"], "qlsched next: expression: expected 5 fields", id="field-count"),
    pytest.param(["* * * * *", "--tz", "Mars/Base"], "qlsched next: timezone:", id="zone"),
    pytest.param(["* * * * *", "--from", "yesterday"], "qlsched next: --from:", id="instant"),
    pytest.param(["* * * * *", "-n", "0"], "qlsched next: -n: must be 1..100000, got 0", id="n-0"),
    pytest.param(
        ["* * * * *", "--dst-gap", "later"],
        "qlsched next: --dst-gap: 'later' is not one of shift, skip",
        id="dst-gap",
    ),
    pytest.param(
        ["* * * * *", "--dst-fold", "twice"],
        "qlsched next: --dst-fold: 'twice' is not one of first, last, both",
        id="dst-fold",
    ),
    pytest.param(
        ["* * * * *", "-n", "-3"], "qlsched next: -n: must be 1..100000, got -3", id="n-neg"
    ),
    pytest.param(
        ["* * * * *", "--jitter-ms", "60000", "--trigger", "p/t"],
        "qlsched next: --jitter-ms: 60000 is not below the trigger's shortest period between"
        " occurrences,"
        " 60000 ms (1 min)",
        id="jitter-period",
    ),
    pytest.param(
        ["0 0 * * *", "--jitter-ms", "3600001", "--trigger", "p/t"],
        "qlsched next: --jitter-ms: must be 0..3600000",
        id="jitter-bound",
    ),
    pytest.param(
        ["0 0 * * *", "--jitter-ms", "1000"],
        "qlsched next: --jitter-ms needs --trigger P/T",
        id="jitter-no-trigger",
    ),
    pytest.param(
        ["0 0 * * *", "--jitter-ms", "1000", "--trigger", "P T"],
        "qlsched next: --trigger: 'P T' is not PROJECT/TRIGGER",
        id="jitter-bad-trigger",
    ),
    pytest.param(
        ["0 0 1 1 *", "--from", "9999-06-01T00:00:00Z"],
        "qlsched next: the fire times fall outside",
        id="past-9999",
    ),
]


@pytest.mark.parametrize(("argv", "err"), BAD)
def test_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], err: str) -> None:
    """Bad expression, zone, instant, DST policy or n < 1: one line on stderr starting with
    ``qlsched next: ``, nothing on stdout, exit 2, no traceback."""
    check(capsys, argv, 2, [], err)


def test_jitter_shows_the_due_times(capsys: pytest.CaptureFixture[str]) -> None:
    """Rule: with ``--jitter-ms`` and ``--trigger`` each line is the scheduled time, then
    ``due`` and S + h, h computed by the scheduler's own hash of (project, trigger,
    revision, S); a first ``#`` line names the jitter and the trigger; the fold's second
    instant keeps its own offset."""
    argv = ["30 1 * * *", "--tz", "America/New_York", "--from", "2026-11-01T00:00:00"]
    argv += ["-n", "2", "--dst-fold", "both", "--jitter-ms", "600000", "--trigger", "p/backup"]
    firsts = [1_793_511_000_000, 1_793_514_600_000]  # 01:30 EDT, 01:30 EST
    due = [
        datetime.fromtimestamp((s + jitter_offset_ms("p", "backup", 3, s, 600_000)) / 1000, NY)
        for s in firsts
    ]
    check(
        capsys,
        [*argv, "--revision", "3"],
        0,
        [
            "# dst_gap = shift, dst_fold = both",
            "# jitter_ms = 600000 (trigger p/backup revision 3): scheduled, then due",
            f"2026-11-01T01:30:00-04:00 due {due[0].isoformat(timespec='milliseconds')}",
            f"2026-11-01T01:30:00-05:00 due {due[1].isoformat(timespec='milliseconds')}",
        ],
    )
    assert due[1].utcoffset() == -timedelta(hours=5)


def test_default_from_is_now(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --from the preview starts now: N increasing times, all in the future."""
    before = datetime.now().astimezone()
    assert main(["next", "* * * * * *", "--tz", "Europe/London", "-n", "3"]) == 0
    times = [datetime.fromisoformat(line) for line in capsys.readouterr().out.splitlines()]
    assert len(times) == 3
    assert before < times[0] < times[1] < times[2]


def test_subprocess() -> None:
    """``python -m qlsched next`` works as a separate process: exit 0, the lines on stdout,
    and it loads neither asyncpg nor trio (the CLI imports only the chosen command)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["next", "30 1 * * *", "--tz", "Australia/Lord_Howe", "--from", "2026-04-04T12:00"]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "qlsched", *args, "-n", "2"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # 01:30 is in the 30-minute fold [01:30, 02:00): a fixed hour fires its first instant.
    assert result.stdout.splitlines() == ["2026-04-05T01:30:00+11:00", "2026-04-06T01:30:00+10:30"]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert "qlsched.core.cron" in imported  # the import log was read
    assert not {"asyncpg", "trio", "trio_asyncio", "hypercorn"} & imported


def test_subprocess_bad_input() -> None:
    """A bad expression in a real process: exit 2, one stderr line, no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "qlsched", "next", "61 * * * *"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "qlsched next: minute: 61 is out of range 0-59\n"


def test_subprocess_refuses_an_unbounded_count() -> None:
    """Rule: ``-n`` above 100,000 (``-n 100000000`` grew until killed) is refused at once:
    exit 2, one stderr line, nothing computed or printed."""
    result = subprocess.run(
        [sys.executable, "-m", "qlsched", "next", "* * * * * *", "-n", "100000000"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "qlsched next: -n: must be 1..100000, got 100000000\n"
