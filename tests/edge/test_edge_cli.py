"""``qlsched edge publish|run|status``: the cluster's TOML and validation, one-line errors with
exit 1 (failed) or 2 (bad input), never a traceback, and a default file per user."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qlsched.cli import main
from qlsched.commands.edge import default_db_path
from tests.edge.support import publish_file, qlsched, read


def one_line_error(err: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_publish_twice_changes_nothing(tmp_path: Path) -> None:
    """Publishing creates the file with its schema; the same file again reports every entry
    unchanged and moves no revision."""
    toml = publish_file(tmp_path / "t.toml", 3)
    db = tmp_path / "edge.sqlite3"

    first = qlsched("edge", "publish", str(toml), "--db", str(db))
    second = qlsched("edge", "publish", str(toml), "--db", str(db))

    assert first.returncode == 0, first.stderr
    assert "trigger edge/t000002: added" in first.stdout
    assert second.returncode == 0, second.stderr
    assert second.stdout.count(": unchanged") == 5
    assert read(db, "SELECT max(revision) FROM triggers") == [(1,)]


def test_invalid_file_is_bad_input_and_publishes_nothing(tmp_path: Path) -> None:
    """An invalid entry is named in one line with exit 2, and nothing is created."""
    toml = tmp_path / "bad.toml"
    toml.write_text(
        publish_file(tmp_path / "ok.toml", 1).read_text() + "\n[[triggers]]\n"
        'project = "edge"\nid = "bad"\ntask = "job"\ncron = "0 25 * * *"\n'
    )
    db = tmp_path / "edge.sqlite3"

    result = qlsched("edge", "publish", str(toml), "--db", str(db))

    assert result.returncode == 2
    one_line_error(result.stderr)
    assert 'triggers[1] (id "bad"): cron: hour' in result.stderr
    assert not db.exists()


def test_status_reads_the_file(tmp_path: Path) -> None:
    """Status shows every schedule and the backlog (JSON for scripts); a missing file is a
    one-line failure (exit 1), never created by status."""
    db = tmp_path / "edge.sqlite3"
    qlsched("edge", "publish", str(publish_file(tmp_path / "t.toml", 2)), "--db", str(db))

    result = qlsched("edge", "status", "--db", str(db), "--json")
    missing = qlsched("edge", "status", "--db", str(tmp_path / "none.sqlite3"))

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [s["trigger_id"] for s in report["schedules"]] == ["t000000", "t000001"]
    assert report["due_backlog"] == 2
    assert report["runs_total"] == 0
    assert missing.returncode == 1
    one_line_error(missing.stderr)
    assert "no Edge database here" in missing.stderr
    assert not (tmp_path / "none.sqlite3").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cadence-ms", "5"], "--cadence-ms=5 is out of bounds 10..600000"),
        (["--claim-budget", "0"], "--claim-budget=0 is out of bounds 1..256"),
        (["--http", "nonsense"], "--http=nonsense: expected HOST:PORT"),
    ],
)
def test_run_rejects_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    """A bad option of ``edge run`` exits 2 with one line naming it, before the file is
    opened or locked."""
    db = tmp_path / "edge.sqlite3"

    code = main(["edge", "run", "--db", str(db), *flags])

    err = capsys.readouterr().err
    assert code == 2
    one_line_error(err)
    assert message in err
    assert not db.exists()


def test_default_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --db: QLSCHED_EDGE_DB, else /var/lib/qlsched as root, else the XDG data
    directory."""
    monkeypatch.setenv("QLSCHED_EDGE_DB", str(tmp_path / "x.sqlite3"))
    assert default_db_path() == str(tmp_path / "x.sqlite3")
    monkeypatch.delenv("QLSCHED_EDGE_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_db_path() == str(tmp_path / "data" / "qlsched" / "edge.sqlite3")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_db_path() == "/var/lib/qlsched/edge.sqlite3"


def test_publish_uses_the_default_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``edge publish FILE`` without --db writes the default file, creating its directory."""
    target = tmp_path / "deep" / "dir" / "edge.sqlite3"
    monkeypatch.setenv("QLSCHED_EDGE_DB", str(target))

    code = main(["edge", "publish", str(publish_file(tmp_path / "t.toml", 1))])

    assert code == 0
    assert read(target, "SELECT count(*) FROM triggers") == [(1,)]


def test_run_never_creates_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``edge run`` on a path with no Edge file exits 1 naming it, and creates neither the
    file, its directory nor a lock (a mistyped path is not a new, empty scheduler)."""
    db = tmp_path / "missing" / "edge.sqlite3"

    code = main(["edge", "run", "--db", str(db)])

    err = capsys.readouterr().err
    assert code == 1
    one_line_error(err)
    assert "no Edge database here" in err
    assert not db.parent.exists()
