"""The tools' own named SQL blocks, loaded once from ``qlsched/tools/sql/*.sql``.

The same format as the adapters' (``qlsched.sql_blocks``), in a namespace of its own:
the adapter's holds product statements only, so nothing the runtime can name resets a
table or reads a whole history.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from qlsched.sql_blocks import read_blocks


@cache
def _all() -> dict[str, str]:
    return read_blocks(resources.files("qlsched.tools").joinpath("sql"))


def tool_query(name: str) -> str:
    """The SQL text of the tools' block ``name`` (KeyError names an unknown block)."""
    return _all()[name]
