"""The commands' one-time check of who a DSN logs in as, before they touch a qlsched table.

Each role may do one thing (publish: ``qlsched_admin``; run: ``qlsched_runtime``; status:
``qlsched_observer``; work: ``qlsched_worker``). Without this check a wrong DSN surfaces
as a permission error on whichever table the command reads first; with it the user is told
the role they logged in as and the role the command needs. A database without the schema
is named as such too.
"""

from __future__ import annotations

from typing import Final

import msgspec

from qlsched.postgres.dsn import DsnError
from qlsched.postgres.errors import SchemaNotReady
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query

ADMIN: Final = "qlsched_admin"
RUNTIME: Final = "qlsched_runtime"
OBSERVER: Final = "qlsched_observer"
WORKER: Final = "qlsched_worker"
OWNER: Final = "qlsched_owner"

NOT_INITIALISED: Final = "not initialised: run qlsched init-db"


class WrongRole(DsnError):
    """The DSN logs in as a role that may not do what the command does (bad input)."""


class NotInitialised(SchemaNotReady):
    """The database has no qlsched schema (or the server has no qlsched roles)."""


class Login(msgspec.Struct, frozen=True):
    login: str
    database: str
    superuser: bool
    role_exists: bool
    member: bool
    """``login`` is ``role`` or a member of it (a superuser is a member of every role)."""
    initialised: bool


async def read_login(conn: Connection, role: str) -> Login:
    row = await conn.fetchrow(query("login_facts"), role)
    if row is None:  # CURRENT_USER is always in pg_roles; a row-less answer is a broken server
        raise SchemaNotReady("cannot read this DSN's role from pg_roles")
    return Login(**dict(row))


def require(login: Login, *, command: str, role: str) -> None:
    """Raise unless ``login`` may run ``command``: the schema exists and the role fits.

    Raises:
        NotInitialised: no qlsched schema in this database, or no ``role`` on the server.
        WrongRole: the DSN logs in as another role (a superuser passes: the caller decides
            whether to warn).
    """
    if not login.initialised or not login.role_exists:
        raise NotInitialised(f"database {login.database} is {NOT_INITIALISED}")
    if not login.member:
        raise WrongRole(f"this DSN logs in as {login.login}; {command} needs {role}")
