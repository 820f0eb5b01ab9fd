"""Developer sessions: ``nox -s lint types unit`` before a commit, the rest by suite.

Each test session runs one marker, and the markers follow the test folders (applied by
folder in ``tests/conftest.py``), so a session is a folder of the layout. PostgreSQL
suites start their own servers (the embedded PostgreSQL 18, or the binaries in
``QLSCHED_TEST_PG_BINDIR``); ``-- ARGS`` passes ARGS to pytest (``-- -x -k claim``).
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "types", "unit", "lifecycle", "edge"]
nox.options.reuse_existing_virtualenvs = True

SUITES = {
    "unit": "unit",
    "lifecycle": "lifecycle",
    "edge": "edge",
    "integration": "integration",
    "conformance": "conformance",
    "interleave": "interleave",
    "faults": "faults",
    "ha": "ha",
}
"""Session name -> the pytest marker (and test folder) it runs."""


def _install(session: nox.Session) -> None:
    session.install("-e", ".[test]")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict over the product."""
    _install(session)
    session.run("mypy", "--strict", "qlsched")


def _suite(marker: str) -> None:
    def run(session: nox.Session) -> None:
        _install(session)
        workers = ["-n", "2"] if marker not in ("unit", "lifecycle") else []
        session.run("pytest", "-q", "-m", marker, *workers, *session.posargs)

    run.__doc__ = f"pytest -m {marker}: the tests/{marker} folder."
    nox.session(name=marker)(run)


for _marker in SUITES.values():
    _suite(_marker)


@nox.session
def coverage(session: nox.Session) -> None:
    """The fast suites under branch coverage, with the report (the config is pyproject's)."""
    _install(session)
    session.run(
        "pytest",
        "-q",
        "-m",
        "unit or lifecycle or edge",
        "--cov",
        "--cov-report=term",
        *session.posargs,
    )
