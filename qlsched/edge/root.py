"""The Edge runtime's composition root: one scheduler on one file until a signal.

Start order: take the file's run lock (a second scheduler is refused at once, naming the
holder's pid), open and check the schema, start the HTTP endpoint if asked, then run
rounds. SIGINT/SIGTERM stop it: the current round completes (its transaction is never
abandoned), the HTTP endpoint closes, the file is closed, then the lock is released (its
descriptor outlives every SQLite connection to the file: ``lock``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import IO

import msgspec
import trio

from qlsched.core.shown import shown
from qlsched.edge.lock import hold_run_lock
from qlsched.edge.scheduler import EdgeScheduler
from qlsched.edge.settings import EdgeSettings
from qlsched.readable_sink import diagnostics_sink
from qlsched.signals import watch_signals
from qlsched.sqlite.database import file_path, open_checked, require_file
from qlsched.sqlite.errors import EdgeError
from qlsched.sqlite.store import SqliteStore
from qlsched.summary import Summary


class EdgeRun(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``edge run`` is asked to do, each part validated where it entered."""

    db: str
    """The file: a path or a ``file:`` URI."""
    settings: EdgeSettings
    http: tuple[str, int] | None = None
    diagnostics: str | None = None
    """A file for diagnostic JSON lines; None means stderr."""
    summary_s: float = 0.0
    """Seconds between summary lines on stderr (0: none)."""


async def _print_summaries(scheduler: EdgeScheduler, interval_s: float) -> None:
    summary = Summary(scheduler.metrics.summary_counts)
    while True:
        await trio.sleep(interval_s)
        _say(summary.line(interval_s))


def _say(line: str) -> None:
    """A start-up line on stderr (the tests and the bench wait for 'scheduling')."""
    sys.stderr.write(f"qlsched edge run: {line}\n")
    sys.stderr.flush()


async def _serve(run: EdgeRun, stream: IO[str] | None) -> None:
    settings = run.settings
    database = await trio.to_thread.run_sync(lambda: open_checked(run.db, create=False, apply=True))
    try:
        sink = diagnostics_sink(stream, replica=settings.owner, prefix="qlsched edge run:")
        listeners = None
        if run.http is None:
            scheduler = EdgeScheduler(SqliteStore(database), settings, sink)
        else:
            # Only a served /metrics loads the metrics library (and the responder).
            from qlsched.edge.http import bound_address, open_http_listeners, serve_http
            from qlsched.metrics import Metrics

            listeners = await open_http_listeners(*run.http)
            metrics = Metrics(profile="edge")
            scheduler = EdgeScheduler(SqliteStore(database), settings, sink, metrics)
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
                nursery.start_soon(
                    serve_http, scheduler, metrics, listeners, name="qlsched.edge.http"
                )
                host, port = bound_address(listeners)
                _say(f"http on {host}:{port}")
            if run.summary_s > 0:
                nursery.start_soon(
                    _print_summaries, scheduler, run.summary_s, name="qlsched.edge.summary"
                )
            _say(
                f"scheduling {shown(str(file_path(run.db)))} as {shown(settings.owner)}"
                f" (budget {settings.claim_budget}, cadence {settings.cadence_ms} ms)"
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


def run_edge(run: EdgeRun) -> int:
    """Schedule ``run.db`` until SIGINT or SIGTERM; 0 after a clean stop.

    Raises:
        EdgeError: the file is missing, locked by another ``edge run``, not an Edge file,
            or failed fatally (a full disk, a read-only or corrupt file).
    """
    path = file_path(run.db)
    require_file(path)
    with hold_run_lock(path), contextlib.ExitStack() as files:
        stream: IO[str] | None = None
        if run.diagnostics:
            try:
                stream = files.enter_context(open(run.diagnostics, "a", encoding="utf-8"))
            except OSError as exc:
                raise EdgeError(f"{run.diagnostics}: {exc.strerror}") from None
        trio.run(_serve, run, stream)
    return 0
