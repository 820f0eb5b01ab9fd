"""The dashboard's templates and assets name nothing of another origin and nothing inline
that the Content-Security-Policy would block (the browser tests check the pages they
visit; this checks every file shipped)."""

from __future__ import annotations

import re
from importlib import resources

FOLDERS = ("templates", "static")


def shipped() -> dict[str, str]:
    root = resources.files("qlsched.ui")
    return {
        f"{folder}/{entry.name}": entry.read_text(encoding="utf-8")
        for folder in FOLDERS
        for entry in root.joinpath(folder).iterdir()
        if entry.name.endswith((".html", ".css", ".js"))
    }


def test_no_file_loads_from_another_origin() -> None:
    """Rule: no template, stylesheet or script names a URL with a scheme or a
    protocol-relative one (SVG's namespace URI aside), an @import, or a web font."""
    files = shipped()
    assert any(name.startswith("templates/") for name in files)
    for name, body in files.items():
        body = body.replace("http://www.w3.org/2000/svg", "")
        assert not re.search(r"https?://|(?:src|href|url)\s*[=(]\s*[\"']?//", body), name
        assert "@import" not in body, name
        assert "@font-face" not in body, name


def test_nothing_inline_that_the_csp_blocks() -> None:
    """Rule: no template carries a style attribute, an inline <script> or <style> body, or
    an on* event handler (script-src and style-src allow 'self' only)."""
    for name, body in shipped().items():
        if not name.endswith(".html"):
            continue
        assert not re.search(r"\sstyle\s*=", body), name
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body), name
        assert "<style" not in body, name
        assert not re.search(r"\son[a-z]+\s*=", body), name
