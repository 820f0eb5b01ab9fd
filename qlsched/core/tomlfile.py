"""Reading a TOML file (publish file, config file) within bounds: size, nesting, one error.

``tomllib`` parses nested arrays and inline tables by recursion, so a file nested a few
hundred levels deep ends in ``RecursionError`` (a traceback thousands of lines long)
instead of a decode error, and an integer literal past Python's digit limit raises a bare
``ValueError``. Dotted keys (``a.b.c... = 1``) nest without recursion in the parser but not
in what reads the result. So: the size is checked first, then the source's bracket depth
(strings and comments skipped), the parse is guarded, and the parsed value's depth is
measured without recursion. Every failure is ``TomlFileError``: one line, no traceback.
"""

from __future__ import annotations

import tomllib
from typing import Any, Final

MAX_DEPTH: Final = 32
"""Nesting allowed in a file (brackets, or tables and arrays in the parsed value); the
files qlsched reads need 3."""


class TomlFileError(ValueError):
    """A file that is too large, too deeply nested or not valid TOML (one line)."""


def _string_end(raw: bytes, start: int, quote: bytes) -> int:
    """The index after the string opened at ``start`` by ``quote`` (one or three quote
    characters); the end of the line (or of the file) when it is not closed."""
    multiline = len(quote) == 3
    escapes = quote[:1] == b'"'
    i = start + len(quote)
    n = len(raw)
    while i < n:
        c = raw[i]
        if escapes and c == 0x5C:  # backslash: skip the escaped character
            i += 2
            continue
        if raw.startswith(quote, i):
            end = i + len(quote)
            # A multi-line string may end with up to two more quotes inside it.
            while multiline and end < n and raw[end] == quote[0] and end - i < 5:
                end += 1
            return end
        if c == 0x0A and not multiline:
            return i
        i += 1
    return n


def bracket_depth(raw: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``raw`` outside strings and comments.

    An upper bound for the parser's recursion; a malformed file may be mis-scanned, but
    then the parser rejects it anyway.
    """
    depth = deepest = 0
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x23:  # '#': a comment to the end of the line
            newline = raw.find(b"\n", i)
            i = n if newline < 0 else newline + 1
        elif c in (0x22, 0x27):  # '"' or "'"
            quote = raw[i : i + 3] if raw[i : i + 3] in (b'"""', b"'''") else raw[i : i + 1]
            i = _string_end(raw, i, quote)
        else:
            if c in (0x5B, 0x7B):  # '[' '{'
                depth += 1
                deepest = max(deepest, depth)
            elif c in (0x5D, 0x7D) and depth:  # ']' '}'
                depth -= 1
            i += 1
    return deepest


def value_depth(value: Any) -> int:
    """How deeply tables and arrays nest in a parsed value (a scalar is 0), iteratively."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def decode_toml(raw: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Parse ``raw`` (UTF-8 TOML) within the bounds.

    Raises:
        TomlFileError: larger than ``max_bytes``, nested deeper than ``max_depth``, not
            UTF-8, or not valid TOML; the message says which (never the file's content).
    """
    if len(raw) > max_bytes:
        raise TomlFileError(f"larger than {max_bytes} bytes")
    if bracket_depth(raw) > max_depth:
        raise TomlFileError(f"nested deeper than {max_depth} levels")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlFileError(f"not UTF-8 (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlFileError(f"not valid TOML: {exc}") from None
    except RecursionError:
        raise TomlFileError(f"nested deeper than {max_depth} levels") from None
    except ValueError:
        # tomllib lets int()'s own limit through: a literal of thousands of digits.
        raise TomlFileError("not valid TOML: a number has too many digits") from None
    if value_depth(data) > max_depth:
        raise TomlFileError(f"nested deeper than {max_depth} levels")
    return data


def printable(text: str) -> str:
    """``text`` with every unprintable character escaped (``\\x1b``, ``\\u202e``), for
    messages that quote something a hostile file chose (an unknown key)."""
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)
