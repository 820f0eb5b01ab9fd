"""Named SQL blocks, loaded once from ``qlsched/postgres/sql/*.sql`` (``qlsched.sql_blocks``).

The comment lines under a block's ``-- name: NAME`` say its purpose, its ``$n`` parameters
and the fence fields it checks. SQL is never built from strings in Python: every statement
the adapter sends is one of these blocks, sent as a prepared statement (asyncpg caches it
per connection, so a hot query costs one round trip).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from qlsched.sql_blocks import read_blocks


@cache
def _all() -> dict[str, str]:
    return read_blocks(resources.files("qlsched.postgres").joinpath("sql"))


def query(name: str) -> str:
    """The SQL text of block ``name`` (KeyError names an unknown block)."""
    return _all()[name]
