"""Named SQL blocks of the Edge adapter, loaded once from ``qlsched/sqlite/sql/*.sql``
(``qlsched.sql_blocks``).

The comment lines under a block's ``-- name: NAME`` say its purpose and ``?n`` parameters.
Python never builds SQL from strings: every statement is one block.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from qlsched.sql_blocks import read_blocks


@cache
def _all() -> dict[str, str]:
    return read_blocks(resources.files("qlsched.sqlite").joinpath("sql"))


def query(name: str) -> str:
    """The SQL text of block ``name`` (KeyError names an unknown block)."""
    return _all()[name]
