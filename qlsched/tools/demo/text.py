"""Text helpers shared by the demo's live view and its summary."""

from __future__ import annotations

import datetime as dt
import textwrap

WIDTH = 100


def clock(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M:%S")


def wrap(text: str, indent: str = "  ", hang: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + hang)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
