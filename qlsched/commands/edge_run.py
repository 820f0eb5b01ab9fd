"""``qlsched edge run --db PATH``: the Edge scheduler, one process per file.

Start order: validate the options, take the file's run lock (a second scheduler is refused
at once, naming the holder's pid), open and check the schema, start the HTTP endpoint if
asked, then run rounds. SIGINT/SIGTERM stop it: the current round completes (its
transaction is never abandoned), the HTTP endpoint closes, the lock is released.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from typing import IO

import trio

from qlsched.commands._signals import watch_signals
from qlsched.core.shown import shown
from qlsched.readable_sink import diagnostics_sink
from qlsched.sqlite.database import file_path, open_checked, require_file
from qlsched.sqlite.errors import EdgeError
from qlsched.sqlite.http import bound_address, open_http_listeners, parse_address, serve_http
from qlsched.sqlite.lock import hold_run_lock
from qlsched.sqlite.scheduler import EdgeScheduler, EdgeSettings
from qlsched.sqlite.store import SqliteStore


def run(args: argparse.Namespace, db: str) -> int:
    settings = EdgeSettings(
        cadence_ms=args.cadence_ms if args.cadence_ms is not None else 1_000,
        claim_budget=args.claim_budget if args.claim_budget is not None else 256,
        owner=args.owner or "",
    ).validated()
    address = parse_address(args.http) if args.http else None
    path = file_path(db)

    async def body(stream: IO[str] | None) -> int:
        database = await trio.to_thread.run_sync(lambda: open_checked(db, create=False, apply=True))
        try:
            listeners = await open_http_listeners(*address) if address is not None else None
            sink = diagnostics_sink(stream, replica=settings.owner, prefix="qlsched edge run:")
            scheduler = EdgeScheduler(SqliteStore(database), settings, sink)
            stop = trio.Event()
            failure: EdgeError | None = None
            async with trio.open_nursery() as nursery:
                # The handlers are in place before readiness is announced.
                await nursery.start(
                    watch_signals,
                    (signal.SIGINT, signal.SIGTERM),
                    lambda _: stop.set(),
                    name="qlsched.signals",
                )
                if listeners is not None:
                    nursery.start_soon(serve_http, scheduler, listeners, name="qlsched.edge.http")
                    host, port = bound_address(listeners)
                    print(f"qlsched edge run: http on {host}:{port}", file=sys.stderr)
                print(
                    f"qlsched edge run: scheduling {shown(str(path))} as {shown(settings.owner)}"
                    f" (budget {settings.claim_budget}, cadence {settings.cadence_ms} ms)",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    await scheduler.run(stop)
                except EdgeError as exc:  # raised after the nursery, not inside its group
                    failure = exc
                nursery.cancel_scope.cancel()
            if failure is not None:
                raise failure
        finally:
            database.close()
        return 0

    require_file(path)
    with hold_run_lock(path), contextlib.ExitStack() as files:
        stream: IO[str] | None = None
        if args.diagnostics:
            try:
                stream = files.enter_context(open(args.diagnostics, "a", encoding="utf-8"))
            except OSError as exc:
                raise EdgeError(f"{args.diagnostics}: {exc.strerror}") from None
        return trio.run(body, stream)
