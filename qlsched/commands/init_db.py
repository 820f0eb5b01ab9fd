"""``qlsched init-db``: database, roles, schema; prints one DSN per LOGIN role.

The superuser DSN comes from ``--dsn``, ``QLSCHED_SUPERUSER_DSN`` or the libpq variables
(``PGHOST``/``PGSERVICE`` and the rest, with ``PGPASSWORD`` or a password file), so it need
not show in ``ps``; with none of them, the local database. A printed DSN carries a password
only when this run generated it, and with ``--password-file`` not even then: the generated
passwords go to that file (mode 0600, the ``.pgpass`` format, usable as ``PGPASSFILE``)
and stdout shows none.
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import IO

from qlsched.commands._common import fail, run_command
from qlsched.commands._local import local_data_dir, open_local
from qlsched.postgres.dsn import superuser_dsn
from qlsched.postgres.initdb import InitReport, RoleDsn, init_db, password_env

GENERATED_NOTE = "  (generated password: shown only now)"


def _note(role: RoleDsn, password_file: str | None) -> str:
    if role.source == "generated":
        return f"  (generated password: in {password_file})" if password_file else GENERATED_NOTE
    if role.source == "environment":
        return f"  (password from {password_env(role.role)})"
    return ""


def print_report(report: InitReport, *, password_file: str | None = None) -> None:
    made = "created" if report.created_database else "exists"
    print(f"database {report.database}: {made}")
    for name in report.migrate.applied:
        print(f"migration {name}: applied")
    for name in report.migrate.already:
        print(f"migration {name}: already applied")
    for role in report.roles:
        shown = role.bare if password_file is not None else role.shown
        print(f"{role.role}: {shown}{_note(role, password_file)}")


def _pgpass_field(text: str) -> str:
    return text.replace("\\", "\\\\").replace(":", "\\:")


class PasswordFileError(Exception):
    """The password file cannot be written (exit 2: bad input)."""


def open_password_file(path: str) -> IO[str]:
    """Open (create) ``path`` for the generated passwords before anything is changed, so a
    path that cannot be written fails the run before a password is set. Mode 0600; a
    symbolic link or a non-regular file is refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise PasswordFileError(f"--password-file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PasswordFileError(f"--password-file {path}: not a regular file")
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w", encoding="utf-8")


def write_passwords(fh: IO[str], report: InitReport) -> None:
    """The generated passwords in ``.pgpass`` form (``*:*:DATABASE:ROLE:PASSWORD``); the
    file is left as it was when this run generated none (a second run keeps the first's)."""
    lines = [
        ":".join(("*", "*", _pgpass_field(report.database), _pgpass_field(r.role), r.password))
        for r in report.roles
        if r.generated and r.password is not None
    ]
    if not lines:
        return
    fh.truncate(0)
    fh.write("".join(line + "\n" for line in lines))
    fh.flush()
    os.fsync(fh.fileno())


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dsn",
        help="superuser DSN (also QLSCHED_SUPERUSER_DSN, or the libpq PG* variables and"
        " .pgpass when PGHOST or PGSERVICE is set; default: the local database)",
    )
    p.add_argument("--database", default="qlsched", help="database to create (default qlsched)")
    p.add_argument(
        "--password-file",
        metavar="PATH",
        help="write generated passwords to PATH (mode 0600, .pgpass format), not to stdout",
    )
    p.add_argument("--pg-bindir", help="PostgreSQL server binaries for the embedded database")
    p.add_argument("--data-dir", help="data directory of the local database (qlsched local)")


def main(args: argparse.Namespace) -> int:
    password_file: IO[str] | None = None
    if args.password_file is not None:
        try:
            password_file = open_password_file(args.password_file)
        except PasswordFileError as exc:
            return fail("init-db", str(exc), 2)

    async def body(dsn: str) -> int:
        report = await init_db(dsn, database=args.database)
        if password_file is not None:
            try:
                write_passwords(password_file, report)
            except OSError as exc:
                # Never fall back to stdout: the caller asked for no password there.
                return fail(
                    "init-db",
                    f"--password-file {args.password_file}: {exc.strerror}; set the roles'"
                    " passwords again with QLSCHED_<ROLE>_PASSWORD",
                )
        print_report(report, password_file=args.password_file)
        return 0

    async def local() -> int:
        server = await open_local("init-db", local_data_dir(args.data_dir), args.pg_bindir)
        return await body(server.dsn())

    try:
        dsn = superuser_dsn(args.dsn, os.environ)
        if dsn is not None:  # an empty --dsn is bad input (init_db says so), not "local"
            return run_command("init-db", lambda: body(dsn))
        return run_command("init-db", local)
    finally:
        if password_file is not None:
            password_file.close()
