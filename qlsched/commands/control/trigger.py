"""``qlsched trigger P/T [--note TEXT] [--actor TEXT]``: ask for one Run now (admin DSN).

The request is for the trigger's current revision; a replica admits it as one Run keyed
``ql3:manual:v1:<trigger>:<revision>:<request>``, without moving the cron cursor. A
disabled or archived trigger is refused at once (exit 1).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from qlsched.admin.requests import trigger_now
from qlsched.commands.control.lines import recorded_line
from qlsched.commands.control.requests import record
from qlsched.commands.options import (
    add_actor_options,
    add_overlap_option,
    add_trigger_argument,
)
from qlsched.core.control import trigger_ref
from qlsched.core.requests import Recorded, RecordResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_trigger_argument(p)
    add_overlap_option(p)
    add_actor_options(p, "why (kept with the request and shown by status)")


def main(args: argparse.Namespace) -> int:
    def describe(result: RecordResult) -> str:
        assert isinstance(result, Recorded)
        return recorded_line(result, edge=False)

    def prepare() -> Callable[[str], Awaitable[RecordResult]]:
        ref = trigger_ref(args.trigger)

        async def call(dsn: str) -> RecordResult:
            return await trigger_now(
                dsn, ref, note=args.note, actor=args.actor, overlap=args.overlap
            )

        return call

    return record("trigger", args, prepare, describe)
