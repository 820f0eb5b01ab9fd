"""Named SQL blocks of the Edge adapter, loaded once from ``qlsched/sqlite/sql/*.sql``.

A block starts at a ``-- name: NAME`` line, followed by one or two comment lines (purpose,
``?n`` parameters). Python never builds SQL from strings: every statement is one block.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def _parse(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        blocks[m.group(1)] = text[m.end() : end].strip().rstrip(";").strip()
    return blocks


@cache
def _all() -> dict[str, str]:
    blocks: dict[str, str] = {}
    folder = resources.files("qlsched.sqlite").joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, body in _parse(entry.read_text(encoding="utf-8")).items():
                if name in blocks:
                    raise RuntimeError(f"duplicate SQL block name {name!r}")
                blocks[name] = body
    return blocks


def query(name: str) -> str:
    """The SQL text of block ``name`` (KeyError names an unknown block)."""
    return _all()[name]
