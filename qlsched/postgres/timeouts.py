"""The runtime role's timeouts: set by bootstrap, rebuilt into the catalog reference.

A module of its own because both the migration runner and the catalog reference use it
(it lived in ``migrate.py`` once, which made ``catalog`` and ``migrate`` import each other).
"""

from __future__ import annotations

import msgspec


class RoleTimeouts(msgspec.Struct, frozen=True):
    """The runtime role's timeouts; each must stay below the lease (readiness checks)."""

    idle_in_transaction_ms: int = 5_000
    lock_timeout_ms: int = 2_000
    statement_timeout_ms: int = 5_000
