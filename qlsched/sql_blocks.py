"""Named SQL blocks: the one format of ``sql/*.sql`` in ``qlsched/postgres``,
``qlsched/sqlite`` and ``qlsched/tools``, each loaded into its own namespace by its
``queries.py``.

A block starts at a ``-- name: NAME`` line; the comment lines under it say its purpose and
parameters. A ``-- fragment: NAME`` block is no statement: it is the text a line
``-- include: NAME`` of any block in the folder stands for, so a rule two statements share
(a CASE, a join) is written once. Neutral ground beside ``migrations``: it reads files, so
it is not ``core``, and it imports neither adapter.
"""

from __future__ import annotations

import re
from importlib.resources.abc import Traversable

_NAME = re.compile(r"^-- (name|fragment): ([a-z_]+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^([ \t]*)-- include: ([a-z_]+)[ \t]*$", re.MULTILINE)


def _parse(text: str) -> list[tuple[str, str, str]]:
    """(kind, name, body) of each block, in file order."""
    blocks: list[tuple[str, str, str]] = []
    matches = list(_NAME.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end].strip()
        if m.group(1) == "name" and body.count(";") == 1:
            body = body.rstrip(";").strip()
        blocks.append((m.group(1), m.group(2), body))
    return blocks


def _included(body: str, fragments: dict[str, str]) -> str:
    def fragment(m: re.Match[str]) -> str:
        text = fragments.get(m.group(2))
        if text is None:
            raise RuntimeError(f"SQL include of unknown fragment {m.group(2)!r}")
        lines = [line for line in text.splitlines() if not line.startswith("--")]
        return "\n".join(m.group(1) + line if line else line for line in lines)

    return _INCLUDE.sub(fragment, body)


def read_blocks(folder: Traversable) -> dict[str, str]:
    """Every named block of the ``*.sql`` files in ``folder``, its includes filled in; a name
    used twice is an error."""
    blocks: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for kind, name, body in _parse(entry.read_text(encoding="utf-8")):
                if name in blocks or name in fragments:
                    raise RuntimeError(f"duplicate SQL block name {name!r}")
                (blocks if kind == "name" else fragments)[name] = body
    return {name: _included(body, fragments) for name, body in blocks.items()}
