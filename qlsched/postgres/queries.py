"""Named SQL blocks, loaded once from ``qlsched/postgres/sql/*.sql``.

A block starts at a ``-- name: NAME`` line; the comment lines under it say its purpose,
its ``$n`` parameters and the fence fields it checks. SQL is never built from strings in
Python: every statement the adapter sends is one of these blocks, sent as a prepared
statement (asyncpg caches it per connection, so a hot query costs one round trip).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

_NAME = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def _parse(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end].strip()
        blocks[m.group(1)] = body.rstrip(";").strip() if body.count(";") == 1 else body
    return blocks


def read_blocks(folder: Traversable) -> dict[str, str]:
    """Every named block of the ``*.sql`` files in ``folder``; a name used twice is an error."""
    blocks: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, body in _parse(entry.read_text(encoding="utf-8")).items():
                if name in blocks:
                    raise RuntimeError(f"duplicate SQL block name {name!r}")
                blocks[name] = body
    return blocks


@cache
def _all() -> dict[str, str]:
    return read_blocks(resources.files("qlsched.postgres").joinpath("sql"))


def query(name: str) -> str:
    """The SQL text of block ``name`` (KeyError names an unknown block)."""
    return _all()[name]
