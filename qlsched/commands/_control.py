"""What ``pause`` and ``resume`` share: the admin DSN (given, configured, or the local
database's, as for ``publish``) and one line per outcome on stdout.

A control command prints exactly one line: what it did, or that there was nothing to do
(exit 0 either way). Bad input (a malformed ``P/T``, an unknown trigger, a note too long)
is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from typing import assert_never

from qlsched.commands._local import local_dsn
from qlsched.core.control import AlreadyPaused, NotPaused, Paused, Resumed
from qlsched.core.shown import shown
from qlsched.settings import load_config


async def admin_dsn(command: str, args: argparse.Namespace) -> str:
    """``--dsn``, else ``QLSCHED_DSN`` or the config file's, else the local database's."""
    config = load_config(
        file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
    )
    return config.dsn or await local_dsn(command, args.data_dir, args.pg_bindir, "qlsched_admin")


def iso(ms: int) -> str:
    """An instant in UTC, to the millisecond (``2026-06-01T12:00:00.000Z``)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _note(note: str | None) -> str:
    return "" if note is None else f" (note: {shown(note)})"


def outcome_line(outcome: Paused | AlreadyPaused | Resumed | NotPaused) -> str:
    """The one line a control command prints for its outcome."""
    ref = f"{outcome.project_id}/{outcome.trigger_id}"
    match outcome:
        case Paused(paused_at_ms=at, note=note):
            return f"paused {ref} at {iso(at)}{_note(note)}"
        case AlreadyPaused(paused_at_ms=at, note=note):
            return f"{ref} is already paused (since {iso(at)}){_note(note)}: nothing changed"
        case Resumed() as r:
            if not r.scheduled:
                return (
                    f"resumed {ref}; its trigger is disabled or its project archived, so"
                    " nothing is scheduled until a publish makes it active"
                )
            head = (
                f"resumed {ref} at {iso(r.resumed_at_ms)}: {r.inside} occurrence(s) fell"
                f" inside the pause, {r.paused} added to paused_total"
            )
            if r.fires_at_ms is not None:
                return f"{head}; the one of {iso(r.fires_at_ms)} fires once now"
            if r.next_fire_at_ms is None:
                return f"{head}; the next round sets its cursor"
            return f"{head}; next fire {iso(r.next_fire_at_ms)}"
        case NotPaused():
            return f"{ref} is not paused: nothing changed"
        case _:
            assert_never(outcome)
