"""``qlsched local start|stop|status|dsn ROLE``: the local database the commands share.

Every command run without a DSN uses one persistent embedded PostgreSQL in the data
directory (``--data-dir``, ``QLSCHED_DATA_DIR``, else ``/var/lib/qlsched/pgdata`` as root
and ``~/.local/share/qlsched/pgdata`` otherwise). The first command that needs it starts
it; it then keeps running, shared by every terminal, until ``local stop``.

``status`` exits 0 when it runs, 1 when it does not. ``dsn ROLE`` prints a DSN for
``admin``, ``runtime``, ``worker_ingress``, ``observer``, ``worker`` or ``superuser`` that
works from any process of this user while the server runs (starting it if needed).
"""

from __future__ import annotations

import argparse

from qlsched.commands._common import FAILED, fail, run_command
from qlsched.commands._local import ROLES, local_data_dir, local_dsn, open_local
from qlsched.embedded.local import find_local, stop_local


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(
        dest="action", metavar="ACTION", required=True, help="what to do with it"
    )
    for action, text in (
        ("start", "start the local database (started on first use anyway)"),
        ("stop", "stop it; nothing else ever does"),
        ("status", "whether it runs (exit 0) or not (exit 1)"),
        ("dsn", "print a DSN for ROLE that works from any process while it runs"),
    ):
        q = actions.add_parser(action, help=text, description=text)
        q.add_argument("--data-dir", help="its data directory (also QLSCHED_DATA_DIR)")
        q.add_argument("--pg-bindir", help="PostgreSQL server binaries to start it with")
        if action == "dsn":
            q.add_argument(
                "role",
                metavar="ROLE",
                help="admin, runtime, worker_ingress, observer, worker, superuser",
            )


def main(args: argparse.Namespace) -> int:
    data_dir = local_data_dir(args.data_dir)
    command = f"local {args.action}"
    if args.action == "start":

        async def start() -> int:
            server = await open_local(command, data_dir, args.pg_bindir)
            if not server.started:
                print(f"the local database is already running (pid {server.pid}) in {data_dir}")
            else:
                print(f"the local database is running (pid {server.pid}) in {data_dir}")
            return 0

        return run_command(command, start)
    if args.action == "dsn":
        role = ROLES.get(args.role.removeprefix("qlsched_"))
        if role is None:
            return fail(command, f"no role {args.role!r}: one of {', '.join(ROLES)}", 2)

        async def dsn() -> int:
            print(await local_dsn(command, args.data_dir, args.pg_bindir, role))
            return 0

        return run_command(command, dsn)
    try:
        if args.action == "stop":
            pid = stop_local(data_dir)
            if pid is None:
                print(f"the local database is not running in {data_dir}")
            else:
                print(f"stopped the local database (pid {pid}) in {data_dir}")
            return 0
        found = find_local(data_dir)
    except FAILED as exc:
        return fail(command, str(exc), 1)
    if found is None:
        print(f"the local database is not running in {data_dir}")
        return 1
    print(f"the local database is running (pid {found.pid}) in {data_dir}")
    return 0
