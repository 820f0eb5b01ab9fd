"""The shipped migration files both adapters read: ``schema/<dialect>/NNNN_name.sql``,
numbered, forward-only, each with the SHA-256 its ledger records.

Found inside the installed wheel (``qlsched/_schema/<dialect>``), else in the source tree's
``schema/<dialect>``. Neutral ground: it reads files, so it is not ``core``, and it imports
neither adapter, so ``postgres`` and ``sqlite`` each depend on it without depending on each
other. A failure is raised as the caller's own error type (one line naming the cause).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Literal

import msgspec

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

Dialect = Literal["postgres", "sqlite"]
ErrorType = Callable[[str], Exception]


class Migration(msgspec.Struct, frozen=True):
    version: int
    name: str
    checksum: str
    sql: str


def shipped_schema(dialect: Dialect, error: ErrorType) -> Traversable:
    """The dialect's SQL files: inside the installed wheel, else the source tree's."""
    packaged = resources.files("qlsched").joinpath("_schema", dialect)
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[1] / "schema" / dialect
    if source.is_dir():
        return source
    raise error(f"schema/{dialect} not found: the installation is incomplete")


def read_migrations(directory: Traversable, error: ErrorType) -> list[Migration]:
    """The numbered files of ``directory`` in version order; two with one number are
    refused, since a ledger keyed by version could record only one of them."""
    found: list[Migration] = []
    for entry in directory.iterdir():
        m = _FILE.match(entry.name)
        if m is None:
            continue
        data = entry.read_bytes()
        found.append(
            Migration(
                version=int(m.group(1)),
                name=entry.name,
                checksum=hashlib.sha256(data).hexdigest(),
                sql=data.decode("utf-8"),
            )
        )
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise error("two migration files share a version number")
    return found
