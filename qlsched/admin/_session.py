"""One admin session: check the DSN's role once, then run the action on that connection.

Every ``qlsched.admin`` call opens one connection (``connect_once``: the trio-asyncio bridge
is entered and left inside the call, so it works from any Trio task) and closes it before it
returns; nothing is pooled or kept between calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from qlsched.postgres.login import ADMIN, OBSERVER, read_login, require
from qlsched.postgres.pool import Connection, connect_once

T = TypeVar("T")


async def as_admin(dsn: str, action: str, fn: Callable[[Connection], Awaitable[T]]) -> T:
    """Run ``fn`` on one connection of ``dsn`` after checking it logs in as the admin role
    (a superuser passes).

    Raises:
        WrongRole: the DSN logs in as another role (bad input).
        NotInitialised: the database has no qlsched schema.
        DatabaseUnavailable: the connection failed.
    """

    async def checked(conn: Connection) -> T:
        require(await read_login(conn, ADMIN), command=action, role=ADMIN)
        return await fn(conn)

    return await connect_once(dsn, checked)


async def as_reader(dsn: str, action: str, fn: Callable[[Connection], Awaitable[T]]) -> T:
    """Like ``as_admin``, for reads the admin and the observer role may both make."""

    async def checked(conn: Connection) -> T:
        login = await read_login(conn, ADMIN)
        if not login.member:
            login = await read_login(conn, OBSERVER)
        require(login, command=action, role=f"{ADMIN} or {OBSERVER}")
        return await fn(conn)

    return await connect_once(dsn, checked)
