"""``qlsched publish FILE``: projects, tasks, triggers from TOML (admin DSN), all or nothing.

The file is validated before anything connects; an empty file is bad input (it would
publish nothing and say nothing). The DSN's role is checked once before any write, so a
runtime or observer DSN is named as such instead of failing on a table's permissions.
Without a DSN it publishes to the local database (``qlsched local``) as its admin role.
A publish that runs longer than a second says what it is doing on stderr, once a second,
when stderr is a terminal (a pipe or a log gets the result lines only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from qlsched.commands._common import fail, run_command
from qlsched.commands._local import local_dsn
from qlsched.commands.options import add_database_options
from qlsched.core.publish_result import PublishResult
from qlsched.core.specs import PUBLISH_FILE_MAX_BYTES, SpecError, decode_publish_file
from qlsched.exception_groups import single_leaf_unwrapped
from qlsched.postgres.login import ADMIN, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.publish import publish
from qlsched.settings import load_config

PROGRESS_AFTER_S = 1.0


@asynccontextmanager
async def _progress() -> AsyncIterator[list[str]]:
    """Yield a list to append steps to; while the body runs past a second on a terminal,
    the latest step and the time so far are rewritten on stderr each second."""
    steps = ["connecting"]
    if not sys.stderr.isatty():
        yield steps
        return
    started = time.monotonic()
    shown = False

    async def tick() -> None:
        nonlocal shown
        await trio.sleep(PROGRESS_AFTER_S)
        while True:
            elapsed = time.monotonic() - started
            sys.stderr.write(f"\rqlsched publish: {steps[-1]} ({elapsed:.0f} s)\x1b[K")
            sys.stderr.flush()
            shown = True
            await trio.sleep(1.0)

    try:
        # The body's own error, not a group: the caller maps it to one line and an exit code.
        with single_leaf_unwrapped():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tick, name="qlsched.publish.progress")
                try:
                    yield steps
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        if shown:
            sys.stderr.write("\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the publish file (TOML)")
    p.add_argument("--prune", action="store_true", help="disable triggers missing from the file")
    add_database_options(p, role="admin")


def main(args: argparse.Namespace) -> int:
    try:
        with open(args.file, "rb") as fh:
            raw = fh.read(PUBLISH_FILE_MAX_BYTES + 1)  # one byte over: decode says too large
    except OSError as exc:
        return fail("publish", f"{args.file}: {exc.strerror}", 2)

    async def body() -> int:
        try:
            spec = decode_publish_file(raw)  # validate before connecting
        except SpecError as exc:
            raise SpecError(f"{args.file}: {exc}") from None
        if not (spec.projects or spec.tasks or spec.triggers):
            raise SpecError(
                f"{args.file}: nothing to publish: the file has no [[projects]], [[tasks]] "
                "or [[triggers]] (see examples/triggers.toml)"
            )
        config = load_config(
            file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
        )
        dsn = config.dsn or await local_dsn(
            "publish", args.data_dir, args.pg_bindir, "qlsched_admin"
        )

        async with _progress() as steps:

            async def fn(conn: Connection) -> PublishResult:
                require(await read_login(conn, ADMIN), command="publish", role=ADMIN)
                return await publish(conn, spec, prune=args.prune, progress=steps.append)

            result = await connect_once(dsn, fn)
        for line in result.lines():
            print(line)
        return 0

    return run_command("publish", body)
