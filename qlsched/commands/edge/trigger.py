"""``qlsched edge trigger P/T [--note TEXT] [--actor TEXT] --db PATH``: ask for one Run now,
as ``qlsched trigger`` does on the cluster.

The request is for the trigger's current revision; ``edge run`` admits it as one Run keyed
``ql3:manual:v1:<trigger>:<revision>:<request>`` (scheduled for when it was recorded),
without moving the cron cursor. A disabled or archived trigger is refused at once (exit 1);
a paused trigger's request is held until ``edge resume``. Works beside ``edge run``.
"""

from __future__ import annotations

import argparse

from qlsched.commands.edge._requests import add_common, record
from qlsched.core.control import trigger_ref


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")
    add_common(p, db_help)


def run(args: argparse.Namespace, db: str) -> int:
    return record("trigger", args, db, trigger_ref(args.trigger))
