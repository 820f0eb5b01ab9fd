"""The Edge run lock names the file, not the path (issue #26 item 5): every name of one
file (symlink, hard link, relative path) meets the same lock and reports the same holder;
two different files never share one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qlsched.edge.lock import hold_run_lock, holder_pid
from qlsched.sqlite.errors import EdgeLocked


def names(tmp_path: Path) -> tuple[Path, list[Path]]:
    db = tmp_path / "edge.sqlite3"
    db.write_bytes(b"")
    (tmp_path / "d").mkdir()
    link = tmp_path / "d" / "link.sqlite3"
    link.symlink_to(db)
    hard = tmp_path / "d" / "hard.sqlite3"
    os.link(db, hard)
    return db, [link, hard, Path(os.path.relpath(db))]


def test_every_name_of_the_file_meets_the_lock(tmp_path: Path) -> None:
    """While the lock is held through one name, taking it through a symlink, a hard link or
    a relative path is refused naming this process; each name reports it as the holder."""
    db, others = names(tmp_path)
    with hold_run_lock(str(db)):
        for other in others:
            with (
                pytest.raises(EdgeLocked, match=rf"\(pid {os.getpid()}\)"),
                hold_run_lock(str(other)),
            ):
                pass
            assert holder_pid(str(other)) == os.getpid()
    assert all(holder_pid(str(p)) is None for p in [db, *others])


def test_another_file_has_its_own_lock(tmp_path: Path) -> None:
    """A different file (a copy, not a link) is not locked by the first one's holder."""
    db, _ = names(tmp_path)
    copy = tmp_path / "copy.sqlite3"
    copy.write_bytes(db.read_bytes())
    with hold_run_lock(str(db)), hold_run_lock(str(copy)):
        assert holder_pid(str(copy)) == os.getpid()


def test_holder_pid_reads_the_kernel_table(tmp_path: Path) -> None:
    """``holder_pid`` picks the exclusive flock on the file's device and inode, ignoring
    POSIX locks (SQLite's own), shared locks, waiters and other inodes."""
    db = tmp_path / "edge.sqlite3"
    db.write_bytes(b"")
    st = os.stat(db)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    table = tmp_path / "locks"
    table.write_text(
        f"1: POSIX  ADVISORY  WRITE 11 {dev}:{st.st_ino} 0 EOF\n"
        f"2: FLOCK  ADVISORY  READ 12 {dev}:{st.st_ino} 0 EOF\n"
        f"3: FLOCK  ADVISORY  WRITE 13 {dev}:{st.st_ino + 1} 0 EOF\n"
        f"4: -> FLOCK  ADVISORY  WRITE 14 {dev}:{st.st_ino} 0 EOF\n"
        f"5: FLOCK  ADVISORY  WRITE 15 {dev}:{st.st_ino} 0 EOF\n",
        encoding="ascii",
    )
    assert holder_pid(str(db), proc_locks=str(table)) == 15
    assert holder_pid(str(tmp_path / "missing"), proc_locks=str(table)) is None
