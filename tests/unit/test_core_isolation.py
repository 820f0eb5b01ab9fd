"""``qlsched.core`` is profile-neutral (docs/contract.md §1) and does no I/O: importing all of
it in a fresh interpreter loads no database driver, no event loop, no HTTP server, and nothing
of ``qlsched.postgres`` or ``qlsched.cluster``; and no module of it opens a file, reads the
environment or the process's streams, or uses sockets, threads or subprocesses."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, pkgutil, sys
import qlsched.core
names = sorted(m.name for m in pkgutil.iter_modules(qlsched.core.__path__))
for name in names:
    importlib.import_module("qlsched.core." + name)
print(json.dumps({"core": names, "modules": sorted(sys.modules)}))
"""

FORBIDDEN = ("asyncpg", "trio_asyncio", "hypercorn", "trio", "qlsched.postgres", "qlsched.cluster")


def test_core_imports_no_runtime() -> None:
    """Every module of ``qlsched.core`` imports without asyncpg, trio_asyncio, hypercorn,
    trio or the postgres/cluster packages, so an Edge/SQLite profile can reuse it."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "cron" in report["core"]
    assert "decide" in report["core"]
    loaded = [
        m for m in report["modules"] if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert loaded == []


CORE = REPO / "qlsched" / "core"

REFUSED_MODULES = ("socket", "threading", "subprocess")
"""Modules core may not import at all (``import x``, ``from x import ...``)."""
REFUSED_ATTRIBUTES = {
    ("os", "environ"),
    ("os", "getenv"),
    ("os", "putenv"),
    ("sys", "stderr"),
    ("sys", "stdout"),
    ("sys", "stdin"),
}
"""``module.name`` reads core may not make: the process environment and its streams."""
REFUSED_CALLS = ("open", "print", "input")


def io_in_core(source: str, filename: str) -> list[str]:
    """Each use of I/O in one module's source: imports of ``REFUSED_MODULES``, the
    ``REFUSED_ATTRIBUTES`` (also imported by name) and calls of the ``REFUSED_CALLS``
    builtins, as ``file:line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [
                f"{where}: import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in REFUSED_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            top = node.module.split(".")[0]
            if top in REFUSED_MODULES:
                found.append(f"{where}: from {node.module} import")
            found += [
                f"{where}: from {top} import {a.name}"
                for a in node.names
                if (top, a.name) in REFUSED_ATTRIBUTES
            ]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in REFUSED_ATTRIBUTES:
                found.append(f"{where}: {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in REFUSED_CALLS
        ):
            found.append(f"{where}: {node.func.id}()")
    return found


def test_core_does_no_io() -> None:
    """Rule: no module of ``qlsched.core`` opens a file, prints, reads the environment or
    the process's streams, or imports socket, threading or subprocess (docs: core does no
    I/O; the file, the environment, the host and the stream sink live outside it)."""
    modules = sorted(CORE.glob("*.py"))
    assert {m.name for m in modules} >= {"config.py", "diagnostics.py", "tomlfile.py"}
    found = [f for m in modules for f in io_in_core(m.read_text(), m.name)]
    assert found == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ("data = open('f').read()", "open()"),
        ("import os\nhome = os.environ['HOME']", "os.environ"),
        ("import os\nhome = os.getenv('HOME')", "os.getenv"),
        ("from os import environ", "from os import environ"),
        ("import socket", "import socket"),
        ("from socket import gethostname", "from socket import"),
        ("import sys\nsys.stderr.write('x')", "sys.stderr"),
        ("import sys\nsys.stdout.flush()", "sys.stdout"),
        ("import threading", "import threading"),
        ("from threading import Lock", "from threading import"),
        ("import subprocess", "import subprocess"),
        ("print('x')", "print()"),
    ],
)
def test_the_walk_finds_a_planted_violation(planted: str, expected: str) -> None:
    """Rule: the walk above is not vacuous: each kind of I/O planted in a module is found."""
    source = (CORE / "config.py").read_text() + "\n" + planted + "\n"
    found = io_in_core(source, "config.py")
    assert len(found) == 1, found
    assert expected in found[0]
