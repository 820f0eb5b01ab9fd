"""The openers: ``start_embedded`` (the caller cleans up) and ``open_embedded`` (a ``with``).

They resolve the binaries and the server user, prepare the directories, and hand a
configured ``EmbeddedPostgres`` its first start.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from qlsched.embedded.binaries import find_bindir, require_binaries, server_version
from qlsched.embedded.binary_cache import runnable_bindir
from qlsched.embedded.data_dir import (
    SOCKET_PREFIX,
    TEMP_PREFIX,
    prepare_data_dir,
    private_dir,
    temp_base,
)
from qlsched.embedded.errors import EmbeddedError
from qlsched.embedded.pids import clear_stale
from qlsched.embedded.ports import port_is_free
from qlsched.embedded.postmaster import LIVE, LIVE_LOCK, EmbeddedPostgres
from qlsched.embedded.server_user import server_user
from qlsched.interrupts import uninterrupted

logger = logging.getLogger("qlsched.embedded")

MAX_SOCKET_PATH = 107
"""The longest Unix socket path Linux takes (``sun_path`` less its NUL)."""

# Settings that would change where the server listens or which files it trusts.
RESERVED_SETTINGS = frozenset(
    {
        "listen_addresses",
        "unix_socket_directories",
        "unix_socket_group",
        "unix_socket_permissions",
        "data_directory",
        "config_file",
        "hba_file",
        "ident_file",
    }
)


def _empty(data: Path, attempts: int = 30) -> None:
    """Remove what an interrupted initdb left in ``data`` (the directory itself stays).

    initdb killed by a Ctrl-C leaves its bootstrap backend writing for a moment (until it
    reads the end of its input), so a removal can race with a new file: it is retried,
    bounded (3 s), and never raises over the exception that interrupted initdb."""
    for _ in range(attempts):
        try:
            for child in data.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            return
        except OSError:
            time.sleep(0.1)


def start_embedded(
    data_dir: str | Path | None = None,
    *,
    bindir: str | Path | None = None,
    tcp: bool = False,
    settings: Mapping[str, str] | None = None,
    detached: bool = False,
) -> EmbeddedPostgres:
    """Start a server and return it running; the caller must ``cleanup()`` it.

    Args:
        data_dir: None for an ephemeral server in a new temporary directory (removed by
            ``cleanup()``); a path for a persistent one: ``initdb`` when it is missing or
            empty, reused otherwise (after stopping a server a dead qlsched process left on it).
        bindir: PostgreSQL's bin directory; default ``find_bindir(None)``.
        tcp: also listen on 127.0.0.1 (a free port unless ``settings["port"]``), with the
            generated superuser password in ``.password``.
        settings: extra server settings (``-c name=value``), e.g. ``{"log_statement": "all"}``;
            those that would change where it listens are refused.
        detached: a persistent server that outlives this process (``EmbeddedPostgres.detach``),
            its socket in the data directory itself so that it lasts as long as the server.

    Raises:
        EmbeddedError: binaries missing or unusable, the port taken, the data directory in
            use, unreachable or incompatible, or initdb/start failed (with the log's tail).

    Ownership: the returned server is the caller's; it is also stopped at interpreter exit.
    """
    extra, port = _server_settings(settings, tcp=tcp)
    source = find_bindir(None if bindir is None else str(bindir))
    require_binaries(source)
    major, full_version = server_version(source)
    user = server_user()
    runnable = source if user is None else runnable_bindir(source, user, full_version)
    base = temp_base(user)

    temp_dir: Path | None = None
    if data_dir is None:
        temp_dir = private_dir(TEMP_PREFIX, base, user)
        data, socket_dir, fresh = temp_dir / "data", temp_dir, True
    else:
        data = Path(data_dir).expanduser().absolute()
        fresh = prepare_data_dir(data, user, major)
        socket_dir = data if detached else private_dir(SOCKET_PREFIX, base, user)
        if detached and len(str(data / ".s.PGSQL.00000.lock")) > MAX_SOCKET_PATH:
            raise EmbeddedError(
                f"the data directory {data} is too long a path for PostgreSQL's socket "
                f"(at most {MAX_SOCKET_PATH} bytes with the socket name); choose a shorter one"
            )
    if detached and temp_dir is not None:
        raise EmbeddedError("only a persistent server (a data directory) can be detached")

    server = EmbeddedPostgres(
        bindir=runnable,
        data_dir=data,
        socket_dir=socket_dir,
        port=port,
        version=major,
        tcp=tcp,
        settings=extra,
        user=user,
        temp_dir=temp_dir,
    )
    with LIVE_LOCK:
        LIVE.add(server)
    started = time.monotonic()
    try:
        pid = _bring_up(
            server, fresh=fresh, ephemeral=temp_dir is not None, tcp=tcp, detached=detached
        )
    except BaseException:
        with uninterrupted():  # a second Ctrl-C must not leave it half cleaned up
            server.cleanup()
        raise
    took = time.monotonic() - started
    logger.info("started PostgreSQL %s (pid %d) in %s in %.2f s", full_version, pid, data, took)
    return server


def _server_settings(
    settings: Mapping[str, str] | None, *, tcp: bool
) -> tuple[dict[str, str], int | None]:
    """The extra settings (lower-cased names) less the port, and the port if one is set.

    Raises:
        EmbeddedError: a managed setting, a port that is not a number, or one taken.
    """
    extra = {str(k).lower(): str(v) for k, v in (settings or {}).items()}
    refused = sorted(RESERVED_SETTINGS & extra.keys())
    if refused:
        raise EmbeddedError(f"these settings are managed by qlsched.embedded: {', '.join(refused)}")
    try:
        port = int(extra.pop("port")) if "port" in extra else None
    except ValueError:
        raise EmbeddedError("the port setting must be a number") from None
    if tcp and port is not None and not port_is_free(port):
        raise EmbeddedError(f"port {port} on 127.0.0.1 is taken")
    return extra, port


def _bring_up(
    server: EmbeddedPostgres, *, fresh: bool, ephemeral: bool, tcp: bool, detached: bool
) -> int:
    """initdb (a fresh directory) or clear what a dead server left, start, set the TCP
    password, detach if asked; the server's pid. A failed initdb of a persistent
    directory empties it again (it was empty before us: not left half-initialised)."""
    if ephemeral:
        server._spawn_guardian()
    if fresh:
        try:
            server._initdb(sync=not ephemeral)
        except BaseException:
            if not ephemeral:
                with uninterrupted():
                    _empty(server.data_dir)
            raise
    else:
        clear_stale(server.data_dir)
    server._launch()
    if tcp:
        server._set_password()
    pid = server.pid
    if detached:
        server.detach()
    return pid


@contextlib.contextmanager
def open_embedded(
    data_dir: str | Path | None = None,
    *,
    bindir: str | Path | None = None,
    tcp: bool = False,
    settings: Mapping[str, str] | None = None,
) -> Iterator[EmbeddedPostgres]:
    """``with open_embedded() as pg:`` a running server, stopped when the block exits.

    The same arguments as ``start_embedded``. Exceptions, ``KeyboardInterrupt`` and
    ``SystemExit`` leaving the block stop it (fast) before they propagate; an ephemeral
    server's directory is removed, a persistent one's data directory is kept.
    """
    server = start_embedded(data_dir, bindir=bindir, tcp=tcp, settings=settings)
    try:
        yield server
    finally:
        server.cleanup()
