"""``qlsched ui [--dsn OBSERVER_DSN] [--admin-dsn ADMIN_DSN] [--http HOST:PORT]``: the dashboard.

Reads with the observer DSN, acts with the admin DSN (without one the dashboard is read
only); without either it uses the local database, like every command. Tokens come from the
environment, never the command line (``ps`` shows that): ``QLSCHED_UI_VIEWER_TOKEN`` reads,
``QLSCHED_UI_ADMIN_TOKEN`` reads and acts. A listen address other than loopback is refused
without a token (exit 2). SIGINT or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from typing import Final

DEFAULT_HTTP: Final = "127.0.0.1:8080"
VIEWER_ENV: Final = "QLSCHED_UI_VIEWER_TOKEN"
ADMIN_ENV: Final = "QLSCHED_UI_ADMIN_TOKEN"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="observer DSN for every read (default: the local database)")
    p.add_argument(
        "--admin-dsn",
        help="admin DSN for the actions (default: the local database's when --dsn is not"
        " given; with --dsn and without it the dashboard is read only)",
    )
    p.add_argument("--http", default=DEFAULT_HTTP, help=f"HOST:PORT (default {DEFAULT_HTTP})")
    p.add_argument(
        "--origin",
        help="the origin browsers reach it at, when a proxy publishes it (e.g."
        " https://sched.example.com); forms are accepted only from there",
    )
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the local database")
    p.add_argument("--data-dir", help="data directory of the local database (qlsched local)")


def _address(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return host.strip("[]"), int(port)


PRELOAD = (
    "trio",
    "qlsched.commands._common",
    "qlsched.commands._local",
    "qlsched.commands.run",
    "qlsched.signals",
    "qlsched.ui.security",
    "qlsched.ui.serve",
)
"""What ``main`` imports, loaded by ``qlsched.entry`` while a Ctrl-C is only noted."""


def main(args: argparse.Namespace) -> int:
    # Imported here: the parser imports this module for its flags, and `qlsched next`
    # must not load Trio or asyncpg (``PRELOAD`` has them loaded before main runs).
    import trio

    from qlsched.allocator import hold_mmap_threshold
    from qlsched.commands._common import fail, run_command
    from qlsched.commands._local import local_dsn
    from qlsched.commands.run import CannotListen, check_listen
    from qlsched.signals import watch_signals
    from qlsched.ui.security import Tokens, is_loopback

    hold_mmap_threshold()  # a long-running process: its memory must not creep (allocator)
    address = _address(args.http)
    if address is None:
        return fail("ui", f"--http: {args.http!r} is not HOST:PORT", 2)
    if args.origin is not None and not re.fullmatch(r"https?://[^/\s]+/?", args.origin):
        return fail("ui", f"--origin: {args.origin!r} is not scheme://host[:port]", 2)
    tokens = Tokens(
        viewer=os.environ.get(VIEWER_ENV) or None, admin=os.environ.get(ADMIN_ENV) or None
    )
    if not is_loopback(address[0]) and not tokens.any:
        return fail(
            "ui",
            f"--http {args.http} is not a loopback address: set {VIEWER_ENV} and"
            f" {ADMIN_ENV} so that only token holders can read and act",
            2,
        )
    try:
        check_listen(address)  # a port in use: one line, before any database is touched
    except CannotListen as exc:
        return fail("ui", str(exc), 1)

    async def body() -> int:
        from qlsched.ui.serve import open_dashboard, serve

        observer, admin = args.dsn, args.admin_dsn
        if observer is None:
            observer = await local_dsn("ui", args.data_dir, args.pg_bindir, "qlsched_observer")
            if admin is None:
                admin = await local_dsn("ui", args.data_dir, args.pg_bindir, "qlsched_admin")
        dashboard = open_dashboard(observer, admin, tokens, origin=args.origin)
        async with dashboard as app, trio.open_nursery() as n:
            await n.start(
                watch_signals, (signal.SIGINT, signal.SIGTERM), lambda _: n.cancel_scope.cancel()
            )
            host, port = await n.start(serve, app, *address)
            shown = f"[{host}]" if ":" in host else host
            mode = "" if admin is not None else " (read only: no --admin-dsn)"
            print(f"qlsched ui: http://{shown}:{port}/{mode}", file=sys.stderr, flush=True)
        return 0

    return run_command("ui", body)
