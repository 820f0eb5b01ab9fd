"""Where a value holds text that is not UTF-8: a lone surrogate (``"\\ud800"``).

Python strings may hold them (``os.fsdecode`` of a bad argument, ``"\\udcff"``, or a
string built in code), but neither PostgreSQL nor a content digest can take one: the
driver or the encoder would raise a raw ``UnicodeEncodeError`` or ``DataError`` far from
the input. The admin API and the commands look first and name the field instead.
"""

from __future__ import annotations

from typing import Any


def surrogate_in(value: Any, where: str = "") -> str | None:
    """The path (``triggers[0].command``) of the first string in ``value`` (plain data:
    str, list, dict) holding a lone surrogate, ``where`` itself for a string; else None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the text"
        return None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = surrogate_in(key, where) if isinstance(key, str) else None
        inner = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip(".")
        found = found or surrogate_in(item, inner)
        if found is not None:
            return found
    return None
