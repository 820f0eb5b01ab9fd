"""Markers follow the layout: every folder of tests has its marker, applied by folder in
``tests/conftest.py``, so ``-m integration`` (or any suite) selects whole folders and a new
file cannot be missed by forgetting a ``pytestmark`` line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FOLDER_MARKERS, TESTS, folder_marker

HAND_MARKED = ("integration", "lifecycle", "ha", "faults", "conformance", "edge", "unit")


def test_every_test_folder_has_a_marker() -> None:
    """Each folder holding ``test_*.py`` files maps to a marker the config registers."""
    folders = {p.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py")}
    assert folders <= set(FOLDER_MARKERS), folders - set(FOLDER_MARKERS)
    assert "conformance" in folders


def test_markers_are_registered(pytestconfig: pytest.Config) -> None:
    """Each folder marker is declared (``--strict-markers`` would refuse it otherwise)."""
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert set(FOLDER_MARKERS.values()) <= declared


def test_folder_marker_of_a_path() -> None:
    """A file's marker is its top folder's; a path outside ``tests/`` has none."""
    assert folder_marker(TESTS / "conformance" / "test_store_conformance.py") == "conformance"
    assert folder_marker(TESTS / "edge" / "sub" / "x.py") == "edge"
    assert folder_marker(Path("/elsewhere/test_x.py")) is None


def test_this_test_carries_its_folder_marker(request: pytest.FixtureRequest) -> None:
    """The hook ran: this unit test is marked ``unit``."""
    assert request.node.get_closest_marker("unit") is not None


def test_no_file_marks_its_folder_by_hand() -> None:
    """No test file repeats a folder marker by hand (the conftest is the one place)."""
    offenders = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        for name in HAND_MARKED
        if f"pytest.mark.{name}" in p.read_text(encoding="utf-8") and p.name != Path(__file__).name
    ]
    assert offenders == []
