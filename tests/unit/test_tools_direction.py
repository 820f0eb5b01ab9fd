"""The tools wing (``qlsched.tools``: demo, bench, fleet, verification reads) serves the
product without being it: the runtime packages never import it, so a deployment loads none
of it and the tools can change without touching what runs in production."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_by(package: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, package],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout)
    return modules


@pytest.mark.parametrize(
    "package",
    [
        "qlsched.core",
        "qlsched.engine",
        "qlsched.postgres",
        "qlsched.sqlite",
        "qlsched.edge",
        "qlsched.cluster",
    ],
)
def test_the_runtime_never_imports_the_tools(package: str) -> None:
    """Rule: importing every module of a runtime package in a fresh interpreter loads
    nothing of ``qlsched.tools``."""
    modules = _loaded_by(package)
    assert package in modules
    assert [m for m in modules if m == "qlsched.tools" or m.startswith("qlsched.tools.")] == []


def test_the_probe_sees_the_tools_when_they_are_imported() -> None:
    """Rule: the probe itself can see the wing (so an empty list above means something)."""
    assert "qlsched.tools.fleet" in _loaded_by("qlsched.tools")


def test_the_adapter_names_product_statements_only() -> None:
    """Rule: the adapter's SQL namespace holds no tool statement (bench_*, demo_*,
    verify_*); those are the tools' own, loaded by ``qlsched.tools.queries``."""
    from qlsched.postgres.queries import _all
    from qlsched.tools.queries import tool_query

    product = _all()
    assert "claim" in product
    assert [n for n in product if n.startswith(("bench_", "demo_", "verify_"))] == []
    assert tool_query("bench_truncate_schedules")


@pytest.mark.parametrize(
    ("package", "refused"),
    [
        (
            "qlsched.engine",
            ("qlsched.cluster", "qlsched.edge", "qlsched.postgres", "qlsched.sqlite"),
        ),
        (
            "qlsched.sqlite",
            ("qlsched.edge", "qlsched.engine", "qlsched.cluster", "qlsched.postgres"),
        ),
        ("qlsched.edge", ("qlsched.cluster", "qlsched.postgres", "asyncpg", "hypercorn")),
    ],
)
def test_the_profiles_and_their_engine_keep_their_rooms(
    package: str, refused: tuple[str, ...]
) -> None:
    """Rule: the shared round engine knows neither profile nor store; the SQLite store is a
    store only (no runtime); the Edge runtime never loads the cluster's profile."""
    modules = _loaded_by(package)
    assert package in modules
    assert [m for m in modules if any(m == r or m.startswith(r + ".") for r in refused)] == []
