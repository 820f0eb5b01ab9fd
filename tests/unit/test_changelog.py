"""CHANGELOG.md keeps to Keep a Changelog: under each release only the headings Added,
Changed, Fixed, Removed and Schema, each at most once (issue #32: a reader finds a change
where the convention puts it)."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
HEADINGS = {"Added", "Changed", "Fixed", "Removed", "Schema"}


def test_changelog_uses_the_keep_a_changelog_headings_only() -> None:
    """Every ``###`` heading is one of the five, none twice within a release."""
    seen: set[str] = set()
    for line in CHANGELOG.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            seen = set()
        elif line.startswith("### "):
            name = line[4:].strip()
            assert name in HEADINGS, line
            assert name not in seen, f"{name} twice in one release"
            seen.add(name)
    assert seen


def test_changelog_has_no_deeper_headings() -> None:
    """No ``####`` sub-sections: entries are short bullets under the five headings."""
    assert not re.search(r"^####", CHANGELOG.read_text(encoding="utf-8"), re.M)
