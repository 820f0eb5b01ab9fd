"""Fixtures shared by every suite: the session's PostgreSQL and a database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interleave.tally import TALLY
from tests.support.pg import (
    PgCluster,
    TestDatabase,
    create_database,
    drop_database,
    make_template,
    start_cluster,
)

TESTS = Path(__file__).resolve().parent

FOLDER_MARKERS = {
    "conformance": "conformance",
    "edge": "edge",
    "faults": "faults",
    "ha": "ha",
    "integration": "integration",
    "interleave": "interleave",
    "lifecycle": "lifecycle",
    "ui": "ui",
    "unit": "unit",
    "worker": "integration",
}
"""Each test folder's marker (registered in pyproject.toml), applied here by folder so a
new file cannot forget it: ``-m`` selects a suite the way the layout shows it."""


def folder_marker(path: Path) -> str | None:
    """The marker of the test folder ``path`` lies in, or None outside every one."""
    try:
        folder = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return FOLDER_MARKERS.get(folder)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = folder_marker(Path(str(item.path)))
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    cluster = start_cluster()
    try:
        make_template(cluster)
        yield cluster
    finally:
        if cluster.embedded is not None:
            cluster.embedded.cleanup()


@pytest.fixture
def pg_db(pg_cluster: PgCluster) -> Iterator[TestDatabase]:
    db = create_database(pg_cluster)
    try:
        yield db
    finally:
        drop_database(db)


# The interleaving explorer's summary line (issue #14 asks for the count). Under
# pytest-xdist each worker hands its tally to the controller, which prints the sum.


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["interleave"] = TALLY.as_dict()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    tally = getattr(node, "workeroutput", {}).get("interleave")
    if tally:
        TALLY.add(tally)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.explorations == 0:
        return
    terminalreporter.write_sep("-", "interleaving explorer")
    terminalreporter.write_line(
        f"interleave: {TALLY.orderings} orderings explored in {TALLY.explorations} explorations"
        f" ({TALLY.waits} with a lock wait, {TALLY.reordered} ran a step late behind one),"
        f" {TALLY.failed} failed"
    )
    for line in TALLY.lines:
        terminalreporter.write_line(f"  {line}")
