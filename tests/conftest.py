"""Fixtures shared by every suite: the session's PostgreSQL and a database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.pg import (
    PgCluster,
    TestDatabase,
    create_database,
    drop_database,
    make_template,
    start_cluster,
)


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
