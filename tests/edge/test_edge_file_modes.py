"""Edge file modes: ``edge publish`` creates the database (and so SQLite's ``-wal`` and
``-shm`` beside it) 0600 in a directory it creates 0700, and ``edge run``'s lock is 0600,
whatever the umask lets through: task commands (tokens in them) are for the owner alone
(docs/operations.md "File modes")."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.edge.support import publish_file, qlsched, start_run, wait_ready
from tests.edge.test_edge_run import stop


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The common umask (0022), which would leave new files 0644 and directories 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_publish_and_run_create_owner_only_files(tmp_path: Path) -> None:
    """Rule: under umask 0022, ``edge publish`` creates the file's directory 0700 and the
    file 0600; while ``edge run`` holds it, the ``-wal``, ``-shm`` and run-lock files are
    0600 too."""
    db = tmp_path / "new" / "edge.sqlite3"
    toml = publish_file(tmp_path / "t.toml", 1)
    published = qlsched("edge", "publish", str(toml), "--db", str(db))
    assert published.returncode == 0, published.stderr
    assert _mode(db.parent) == 0o700
    assert _mode(db) == 0o600
    proc = start_run(db)
    try:
        wait_ready(proc)
        for suffix in ("-wal", "-shm", ".run-lock"):
            side = db.with_name(db.name + suffix)
            assert _mode(side) == 0o600, (suffix, oct(_mode(side)))
    finally:
        assert stop(proc) == 0


@pytest.mark.usefixtures("open_umask")
def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    """Rule: a directory the operator made keeps its mode (0755 here); only the new file is
    0600."""
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    db = folder / "edge.sqlite3"
    published = qlsched(
        "edge", "publish", str(publish_file(tmp_path / "t.toml", 1)), "--db", str(db)
    )
    assert published.returncode == 0, published.stderr
    assert (_mode(folder), _mode(db)) == (0o755, 0o600)
