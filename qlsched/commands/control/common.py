"""What the control commands share: the admin DSN (given, configured, or the local
database's, as for ``publish``); the line each prints is ``lines.outcome_line``.

A control command prints exactly one line: what it did, or that there was nothing to do
(exit 0 either way). Bad input (a malformed ``P/T``, an unknown trigger, a note too long)
is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import os

from qlsched.commands._local import local_dsn
from qlsched.settings import load_config


async def admin_dsn(command: str, args: argparse.Namespace) -> str:
    """``--dsn``, else ``QLSCHED_DSN`` or the config file's, else the local database's."""
    config = load_config(
        file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
    )
    return config.dsn or await local_dsn(command, args.data_dir, args.pg_bindir, "qlsched_admin")
