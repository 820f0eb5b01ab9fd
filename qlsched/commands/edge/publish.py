"""``qlsched edge publish FILE --db PATH``: the cluster's TOML, validated the same way,
published into the Edge file in one transaction (the file is created when missing)."""

from __future__ import annotations

import argparse

import trio

from qlsched.core.publish_result import PublishResult
from qlsched.core.specs import SpecError, decode_publish_file
from qlsched.signals import interruptible
from qlsched.sqlite.database import open_checked
from qlsched.sqlite.publish import publish


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("file", help="the publish file (TOML), the cluster's format")
    p.add_argument("--db", help=db_help)
    p.add_argument("--prune", action="store_true", help="disable triggers missing from the file")


def run(args: argparse.Namespace, db: str) -> int:
    try:
        with open(args.file, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise SpecError(f"{args.file}: {exc.strerror}") from None
    try:
        spec = decode_publish_file(raw)  # validate before touching the database
    except SpecError as exc:
        raise SpecError(f"{args.file}: {exc}") from None

    async def body() -> PublishResult:
        database = await trio.to_thread.run_sync(lambda: open_checked(db, create=True, apply=True))
        try:
            return await database.call(
                lambda conn: publish(conn, spec, database.clock(), prune=args.prune)
            )
        finally:
            database.close()

    result = trio.run(interruptible, body)
    for line in result.lines():
        print(line)
    return 0
