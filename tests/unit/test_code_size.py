"""Small modules and short functions (the project's standard, issue #32): no module of the
product over 500 lines (the cron parser aside) and no function over 80, so each reads on a
screen or two. The tools wing (``qlsched/tools``) is not the product and not held here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "qlsched"
MODULE_LINES = 500
FUNCTION_LINES = 80
LONG_MODULES_ALLOWED = {"core/cron.py"}


def product_files() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "tools"]


def test_no_product_module_is_over_500_lines() -> None:
    """Every module of the product but the cron parser has at most 500 lines."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in product_files()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert set(long) <= LONG_MODULES_ALLOWED, long


def test_no_product_function_is_over_80_lines() -> None:
    """Every function and method of the product, docstring included, has at most 80 lines."""
    long = [
        f"{p.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1})"
        for p in product_files()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]
    assert long == []
