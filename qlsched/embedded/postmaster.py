"""Process control: the postmaster this process started, its start, readiness and stop.

Invariants:

* Only processes this process started are signalled, by pid: our own postmaster child, or
  a postmaster that a dead qlsched process started on the same data directory (see
  ``pids.clear_stale``).
* No server is left behind. ``cleanup()`` stops it; an interpreter exit stops what is still
  running (``atexit``); a forked child never stops its parent's servers. An ephemeral
  server also has a guardian process (``qlsched.embedded.guardian``) that stops it and
  removes its directory when the parent dies without cleaning up, SIGKILL included.
* Settings are passed per start on the command line (``-c``), so they override
  ``postgresql.conf`` and ``ALTER SYSTEM``; ``pg_hba.conf`` is written once, after
  ``initdb``, and left alone afterwards.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from qlsched.embedded.binaries import clean_env, log_tail
from qlsched.embedded.data_dir import PG_HBA, open_in_server_dir
from qlsched.embedded.errors import EmbeddedError, PortTaken
from qlsched.embedded.guardian import GRACE_S, Guardian, read_pidfile, start_ticks
from qlsched.embedded.password import SUPERUSER, generate_password, set_superuser_password
from qlsched.embedded.pids import OWNER_FILE, STOP_TIMEOUT_S, clear_stale
from qlsched.embedded.ports import free_port, port_is_free
from qlsched.embedded.server_user import ServerUser
from qlsched.interrupts import uninterrupted

logger = logging.getLogger("qlsched.embedded")

START_TIMEOUT_S = 60.0
"""Until the postmaster reports ready; crash recovery of a persistent directory counts."""
STOP_SIGNALS: dict[str, signal.Signals] = {
    # The signals pg_ctl sends for its -m modes; we signal our own child and wait on it
    # instead of running pg_ctl, whose stop loop polls at 100 ms.
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}
LOG_FILE = "postmaster.log"

# The server


LIVE: set[EmbeddedPostgres] = set()
LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    with LIVE_LOCK:
        servers = list(LIVE)
    for server in servers:
        try:
            server.cleanup()
        except Exception:
            logger.exception("could not stop the embedded PostgreSQL in %s", server.data_dir)


def _forget_in_child() -> None:
    # A forked child does not own its parent's servers: it must not stop them when it exits
    # (atexit), and its copy of a guardian pipe must not keep that guardian waiting.
    # No lock here: the child has one thread, and the parent's may have held the lock.
    for server in list(LIVE):
        server._disown()
    LIVE.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def socket_dsn(
    socket_dir: Path, port: int, database: str, user: str, password: str | None = None
) -> str:
    """A libpq/asyncpg URI for the Unix socket ``socket_dir/.s.PGSQL.PORT``."""
    auth = quote(user, safe="")
    if password is not None:
        auth += ":" + quote(password, safe="")
    host = quote(str(socket_dir), safe="/")
    return f"postgresql://{auth}@/{quote(database, safe='')}?host={host}&port={port}"


class EmbeddedPostgres:
    """A PostgreSQL server this process started; made by ``start_embedded``/``open_embedded``.

    Attributes:
        bindir: the binaries the server runs from (a cached copy when the originals were not
            reachable by the server's OS user); its client tools (psql, pg_basebackup,
            pgbench) are there too.
        data_dir: the data directory.
        socket_dir: the private directory of the Unix socket, stable across stop/start.
        port: the port (names the socket file; the TCP port with ``tcp=True``).
        version: the server's major version, e.g. 18.
        password: the generated superuser password for TCP, or None without ``tcp``.
        log_path: the server log (``postmaster.log`` in the data directory).

    Ownership: the caller owns the object and must call ``cleanup()`` (or ``stop()`` and
    later ``cleanup()``); ``open_embedded`` does so. ``stop()`` keeps the data directory and
    ``start()`` restarts on it; ``cleanup()`` also removes what is temporary.
    """

    def __init__(
        self,
        *,
        bindir: Path,
        data_dir: Path,
        socket_dir: Path,
        port: int | None,
        version: int,
        tcp: bool,
        settings: Mapping[str, str],
        user: ServerUser | None,
        temp_dir: Path | None,
    ) -> None:
        self.bindir = bindir
        self.data_dir = data_dir
        self.socket_dir = socket_dir
        # 0 until the first launch picks a free TCP port; then kept across restarts.
        self.port = port if port is not None else (0 if tcp else 5432)
        self.version = version
        self.password: str | None = generate_password() if tcp else None
        self.log_path = data_dir / LOG_FILE
        self._tcp = tcp
        self._settings = dict(settings)
        self._user = user
        self._temp_dir = temp_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._guardian: Guardian | None = None
        self._cleaned = False
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        state = "running" if self._proc is not None else "stopped"
        return f"<EmbeddedPostgres {self.version} {state} {self.data_dir}>"

    @property
    def pid(self) -> int:
        """The postmaster's pid. Raises EmbeddedError when the server is not running."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise EmbeddedError(f"the embedded PostgreSQL in {self.data_dir} is not running")
        return proc.pid

    def dsn(
        self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None
    ) -> str:
        """A libpq/asyncpg URI over the Unix socket (trust: no password is needed)."""
        return socket_dsn(self.socket_dir, self.port, database, user, password)

    def tcp_dsn(
        self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None
    ) -> str:
        """A URI over 127.0.0.1; the superuser's password is filled in when not given."""
        if not self._tcp:
            raise EmbeddedError("this embedded PostgreSQL does not listen on TCP (tcp=False)")
        if password is None and user == SUPERUSER:
            password = self.password
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{quote(database, safe='')}"

    def start(self) -> None:
        """Start the server again on the same data directory; no-op while it runs."""
        with self._lock:
            if self._cleaned:
                raise EmbeddedError("this embedded PostgreSQL was cleaned up; start a new one")
            if self._proc is not None and self._proc.poll() is None:
                return
            self._proc = None
            clear_stale(self.data_dir)
            self._launch()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``smart``, ``fast`` or ``immediate``, as pg_ctl) and wait for it.

        Idempotent. A stop that outlasts its budget escalates to immediate, then SIGKILL.
        """
        if mode not in STOP_SIGNALS:
            raise ValueError(f"stop mode must be one of {', '.join(STOP_SIGNALS)}, not {mode!r}")
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                proc.send_signal(STOP_SIGNALS[mode])
                budget = GRACE_S if mode == "immediate" else STOP_TIMEOUT_S
                try:
                    proc.wait(budget)
                except subprocess.TimeoutExpired:
                    logger.warning(
                        "PostgreSQL did not stop (%s) in %.0f s; immediate", mode, budget
                    )
                    proc.send_signal(signal.SIGQUIT)
                    try:
                        proc.wait(GRACE_S)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            self._proc = None
            (self.data_dir / OWNER_FILE).unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Stop the server and remove what is temporary (all of it, for an ephemeral one).

        Idempotent. The data directory of a persistent server is kept.
        """
        with self._lock:
            if self._cleaned:
                return
            try:
                self.stop()
            finally:
                self._cleaned = True
                with LIVE_LOCK:
                    LIVE.discard(self)
                if self._guardian is not None:
                    # A server that did not stop is the guardian's to end, now.
                    self._guardian.retire(done=self._proc is None)
                    self._guardian = None
                if self._temp_dir is not None:
                    shutil.rmtree(self._temp_dir, ignore_errors=True)
                elif self.socket_dir != self.data_dir:  # a detached server's socket stays
                    shutil.rmtree(self.socket_dir, ignore_errors=True)

    # -- internals --------------------------------------------------------------------------

    def _disown(self) -> None:
        if self._guardian is not None:
            self._guardian.disown()
        if self._proc is not None and self._proc.returncode is None:
            # Not this process's child: Popen must neither reap nor warn about it.
            self._proc.returncode = 0
        self._guardian = None
        self._proc = None
        self._cleaned = True
        self._lock = threading.RLock()  # a parent's thread may have held the old one

    def _as_server(self, args: Sequence[str], **env: str) -> subprocess.CompletedProcess[str]:
        user = self._user
        return subprocess.run(
            list(args),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd="/",
            env=clean_env(**env),
            user=user.uid if user else None,
            group=user.gid if user else None,
            extra_groups=[] if user else None,
            umask=0o077,
            timeout=300,
            check=False,
        )

    def _initdb(self, *, sync: bool) -> None:
        args = [
            str(self.bindir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        if not sync:
            args.append("--no-sync")
        # TZ saves initdb a scan of the zoneinfo tree and makes the default zone UTC.
        result = self._as_server(args, TZ="UTC")
        if result.returncode != 0:
            raise EmbeddedError(
                f"initdb failed in {self.data_dir} (exit {result.returncode}): "
                + log_tail(result.stdout + result.stderr)
            )
        # Truncate in place: the file keeps the owner initdb gave it.
        fd = open_in_server_dir(self.data_dir / "pg_hba.conf", os.O_WRONLY | os.O_TRUNC)
        with open(fd, "w") as hba:
            hba.write(PG_HBA)

    def _server_args(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1" if self._tcp else "",
            "unix_socket_directories": str(self.socket_dir),
            "port": str(self.port),
            "max_connections": "200",
            "shared_buffers": "64MB",
            "wal_level": "replica",
            "max_wal_senders": "10",
        }
        if self._temp_dir is not None:
            # Ephemeral: nothing to keep after an OS crash. Not synchronous_commit=off, which
            # would lose commits on an immediate stop that fault tests rely on surviving.
            settings["fsync"] = "off"
        settings.update(self._settings)
        args = [str(self.bindir / "postgres"), "-D", str(self.data_dir)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        return args

    def _launch(self) -> None:
        # A free port found by binding port 0 can be taken before the postmaster binds it;
        # only then, and only on the first launch, try another. A restart keeps its port.
        retry = self.port == 0
        for attempt in range(3):
            if retry:
                self.port = free_port()
            elif self._tcp and not port_is_free(self.port):
                raise EmbeddedError(f"port {self.port} on 127.0.0.1 is taken")
            try:
                self._launch_once()
                return
            except PortTaken:
                if not retry or attempt == 2:
                    raise
                logger.info("port %d was taken meanwhile; trying another", self.port)

    def _launch_once(self) -> None:
        user = self._user
        fd = open_in_server_dir(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            if user is not None:
                os.fchown(fd, user.uid, user.gid)
            proc = subprocess.Popen(
                self._server_args(),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=clean_env(),
                # Its own session: a terminal's Ctrl-C reaches us, and we stop it in order.
                start_new_session=True,
                user=user.uid if user else None,
                group=user.gid if user else None,
                extra_groups=[] if user else None,
                umask=0o077,
            )
        finally:
            os.close(fd)
        self._proc = proc
        try:
            if self._guardian is not None:
                self._guardian.announce(proc.pid)
            self._write_owner(proc.pid)
            self._wait_ready(proc)
        except BaseException:
            with uninterrupted():
                self.stop("immediate")
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            code = proc.poll()
            if code is not None:
                log = self._log_since_start()
                if self._tcp and ("could not bind IPv4" in log or "already in use" in log):
                    raise PortTaken(f"port {self.port} on 127.0.0.1 is taken")
                raise EmbeddedError(
                    f"PostgreSQL in {self.data_dir} exited during start (code {code}): "
                    + log_tail(log)
                )
            lines = read_pidfile(self.data_dir)
            if (
                lines is not None
                and len(lines) >= 8
                and lines[0].strip() == str(proc.pid)
                and lines[7].strip() in ("ready", "standby")
            ):
                return
            if time.monotonic() > deadline:
                raise EmbeddedError(
                    f"PostgreSQL in {self.data_dir} was not ready within {START_TIMEOUT_S:.0f} s: "
                    + log_tail(self._log_since_start())
                )
            time.sleep(0.005)

    def _log_since_start(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-8000:]

    def detach(self) -> None:
        """Hand the running server over to itself: it outlives this process, which no longer
        stops it (no ``atexit``, no guardian); it is stopped by pid (``local.stop_local``).

        Its owner record names the postmaster as its own starter, so a later start on the
        data directory finds it in use rather than stale.
        """
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None or self._guardian is not None:
                raise EmbeddedError("only a running persistent server can be detached")
            self._write_owner(proc.pid, detached=True)
            with LIVE_LOCK:
                LIVE.discard(self)
            proc.returncode = 0  # no longer ours to reap or to warn about
            self._proc = None
            self._cleaned = True

    def _write_owner(self, postmaster_pid: int, *, detached: bool = False) -> None:
        owner = postmaster_pid if detached else os.getpid()
        record = {
            "owner_pid": owner,
            "owner_start": start_ticks(owner),
            "postmaster_pid": postmaster_pid,
            "detached": detached,
        }
        path = self.data_dir / OWNER_FILE
        staging = path.with_name(OWNER_FILE + ".tmp")
        staging.unlink(missing_ok=True)
        fd = open_in_server_dir(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with open(fd, "w") as out:
            os.fchmod(fd, 0o644)
            if self._user is not None:
                # The server user's, so that pg_basebackup, run by the server, can copy it.
                os.fchown(fd, self._user.uid, self._user.gid)
            out.write(json.dumps(record) + "\n")
        staging.replace(path)

    def _set_password(self) -> None:
        assert self.password is not None
        set_superuser_password(self.bindir, self.dsn(), self.password)

    def _spawn_guardian(self) -> None:
        if self._temp_dir is not None:
            self._guardian = Guardian(
                first_signal=signal.SIGQUIT, remove=[self._temp_dir], postmaster_of=self.data_dir
            )
