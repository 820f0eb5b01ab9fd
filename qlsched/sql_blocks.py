"""Named SQL blocks: the one format of ``sql/*.sql`` in ``qlsched/postgres``,
``qlsched/sqlite`` and ``qlsched/tools``, each loaded into its own namespace by its
``queries.py``.

A block starts at a ``-- name: NAME`` line; the comment lines under it say its purpose and
parameters. Neutral ground beside ``migrations``: it reads files, so it is not ``core``, and
it imports neither adapter.
"""

from __future__ import annotations

import re
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
