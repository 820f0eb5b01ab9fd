"""Free text as a plain-text output may show it: one line, no control sequences.

Notes, actor names, owner names and refusal reasons come from whoever wrote them (a
``--note``, an ``--owner``, a row of the database); printed raw, an ESC sequence would clear
or recolour the reader's terminal or set its title, and a newline would forge a line of its
own. ``shown`` escapes every unprintable character the way ids in messages already are
(``\\x1b``, ``\\x0a``, ``\\u202e``), and the backslash itself, so what a reader sees is
exactly what was stored. ``--json`` outputs need none of this: JSON escapes them.
"""

from __future__ import annotations

from qlsched.core.tomlfile import printable


def shown(text: str | None, *, absent: str = "-") -> str:
    """``text`` on one line with every unprintable character (and ``\\``) escaped;
    ``absent`` for None."""
    if text is None:
        return absent
    return printable(text.replace("\\", "\\\\"))
