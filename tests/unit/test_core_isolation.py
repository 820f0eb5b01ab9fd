"""``qlsched.core`` is profile-neutral (docs/contract.md §1): importing all of it in a fresh
interpreter loads no database driver, no event loop, no HTTP server, and nothing of
``qlsched.postgres`` or ``qlsched.cluster``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
