"""Named SQL blocks and their fragments: a shared rule is written once and sent whole."""

from __future__ import annotations

import inspect
from pathlib import Path

import asyncpg
import pytest

from qlsched.postgres import queries
from qlsched.sql_blocks import read_blocks


def _folder(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / f"{name}.sql").write_text(text, encoding="utf-8")
    return tmp_path


def test_an_include_line_stands_for_the_fragment_at_its_indent(tmp_path: Path) -> None:
    """The fragment's body (its comment lines dropped) replaces the include line, in every
    block of the folder that names it, whichever file defines it; fragments are no blocks."""
    folder = _folder(
        tmp_path,
        a="-- fragment: rule\n-- why\nCASE\n  WHEN x THEN 1\nEND AS r\n",
        b="-- name: one\n-- purpose\nSELECT\n    -- include: rule\n  FROM t;\n"
        "-- name: two\nSELECT y,\n  -- include: rule\n  FROM u;\n",
    )
    blocks = read_blocks(folder)
    assert set(blocks) == {"one", "two"}
    assert (
        blocks["one"] == "-- purpose\nSELECT\n    CASE\n      WHEN x THEN 1\n    END AS r\n  FROM t"
    )
    assert blocks["two"] == "SELECT y,\n  CASE\n    WHEN x THEN 1\n  END AS r\n  FROM u"


def test_an_unknown_fragment_or_a_name_used_twice_is_an_error(tmp_path: Path) -> None:
    """A typo in an include never sends a statement with a comment where its rule was."""
    typo, twice = tmp_path / "typo", tmp_path / "twice"
    typo.mkdir()
    twice.mkdir()
    with pytest.raises(RuntimeError, match="unknown fragment 'rul'"):
        read_blocks(_folder(typo, a="-- name: one\nSELECT\n  -- include: rul\n;\n"))
    with pytest.raises(RuntimeError, match="duplicate SQL block name 'one'"):
        read_blocks(_folder(twice, a="-- fragment: one\n1\n", b="-- name: one\nSELECT 1;\n"))


def test_health_and_the_due_refusal_scan_share_one_lasting_refusal_rule() -> None:
    """Status's refusal list and the scan of due rows name a refusal by the same CASE."""
    from qlsched.postgres.queries import query

    def case_of(name: str) -> str:
        text = query(name)
        return text[text.index("CASE") : text.index("END AS reason")]

    assert "-- include:" not in query("refused_triggers") + query("refused_due_triggers")
    assert case_of("refused_triggers") == case_of("refused_due_triggers")
    assert "digest_invalid:task" in case_of("refused_triggers")


def test_every_statement_fits_the_pools_statement_cache() -> None:
    """Rule: every named block is short enough for the pools' connections to keep it
    prepared (``STATEMENT_CACHE_BYTES``, their ``max_cacheable_statement_size``). A longer
    one is parsed and planned again at every call, silently: the admit grew past asyncpg's
    default (15,360 bytes) twice, by the comment lines of a fix."""
    from qlsched.postgres.pool import STATEMENT_CACHE_BYTES

    default = inspect.signature(asyncpg.connect).parameters["max_cacheable_statement_size"]
    sizes = {name: len(sql.encode()) for name, sql in queries._all().items()}
    assert {name: n for name, n in sizes.items() if n >= STATEMENT_CACHE_BYTES} == {}
    assert sizes["admit"] > default.default // 2  # the blocks are read, with their fragments
