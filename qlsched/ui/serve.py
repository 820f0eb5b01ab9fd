"""Open the dashboard: the observer pool, the role checks, and hypercorn on Trio.

The dashboard is its own process with its own pool on the observer role: however many
browsers load it, no replica's pool or round is touched (a page waits for a connection of
this pool, bounded, never for one of a replica's). The admin DSN is checked once at start
and then used only for actions, one connection per action.
"""

from __future__ import annotations

import getpass
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import trio

from qlsched.asgi import serve_hypercorn
from qlsched.postgres.login import ADMIN, OBSERVER, read_login, require
from qlsched.postgres.pool import Connection, connect_once, open_database
from qlsched.ui.app import Dashboard
from qlsched.ui.routes import ROUTES
from qlsched.ui.security import Csrf, Tokens

POOL_SIZE: Final = 8
ACQUIRE_TIMEOUT_S: Final = 5.0
STATEMENT_TIMEOUT_MS: Final = 5000


def local_user() -> str:
    """The actor name when there is no sign-in: the account the dashboard runs as."""
    try:
        return getpass.getuser()[:200] or "local"
    except (KeyError, OSError):
        return "local"


@asynccontextmanager
async def open_dashboard(
    observer_dsn: str,
    admin_dsn: str | None,
    tokens: Tokens,
    *,
    csrf: Csrf | None = None,
    origin: str | None = None,
) -> AsyncIterator[Dashboard]:
    """The dashboard application on a pool of its own, closed on exit.

    Raises:
        WrongRole: ``observer_dsn`` does not log in as the observer role, or ``admin_dsn``
            not as the admin role.
        DatabaseUnavailable, NotInitialised: the database cannot be used.
    """
    if admin_dsn is not None:

        async def admin_check(conn: Connection) -> None:
            require(await read_login(conn, ADMIN), command="ui --admin-dsn", role=ADMIN)

        await connect_once(admin_dsn, admin_check)
    async with open_database(
        observer_dsn,
        min_size=1,
        max_size=POOL_SIZE,
        application_name="qlsched-ui",
        settings={"statement_timeout": str(STATEMENT_TIMEOUT_MS)},
        acquire_timeout=ACQUIRE_TIMEOUT_S,
    ) as db:

        async def observer_check(conn: Connection) -> None:
            require(await read_login(conn, OBSERVER), command="ui", role=OBSERVER)

        await db.run(observer_check)
        yield Dashboard(
            db=db,
            admin_dsn=admin_dsn,
            tokens=tokens,
            local_user=local_user(),
            routes=ROUTES,
            csrf=csrf,
            origin=origin,
        )


async def serve(
    app: Dashboard,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled; ``task_status.started((host, port))`` once bound
    (``port=0`` picks a free port)."""
    async with trio.open_nursery() as nursery:
        bound: str = await nursery.start(serve_hypercorn, app, host, port)
        address = bound.partition("://")[2]
        bound_host, _, bound_port = address.rpartition(":")
        task_status.started((bound_host.strip("[]"), int(bound_port)))
