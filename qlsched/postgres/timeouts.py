"""The runtime role's timeouts: set by bootstrap, rebuilt into the catalog reference.

A module of its own because both the migration runner and the catalog reference use it
(it lived in ``migrate.py`` once, which made ``catalog`` and ``migrate`` import each other).
"""

from __future__ import annotations

import msgspec

from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


class RoleTimeouts(msgspec.Struct, frozen=True):
    """The runtime role's timeouts; each must stay below the lease (readiness checks)."""

    idle_in_transaction_ms: int = 5_000
    lock_timeout_ms: int = 2_000
    statement_timeout_ms: int = 5_000


async def apply_role_timeouts(conn: Connection, timeouts: RoleTimeouts) -> None:
    """Hand the timeouts to the bootstrap script (it reads them as settings), in the
    caller's transaction: the bootstrap itself and the catalog reference's rebuild."""
    await conn.execute(
        query("bootstrap_settings"),
        str(timeouts.idle_in_transaction_ms),
        str(timeouts.lock_timeout_ms),
        str(timeouts.statement_timeout_ms),
    )
