"""The ``harness`` fixture: the conformance suite runs once per registered store.

To add a store, register a factory: an async context manager taking the pytest request (so
it can pull in other fixtures, e.g. a database) and yielding a ``StoreHarness``. Adding the
PostgreSQL adapter is one line in ``HARNESSES``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import pytest

from tests.conformance.harness import OverlapHarness, RequestHarness, StoreHarness
from tests.conformance.memory_harness import open_memory_harness
from tests.conformance.pg_harness import open_pg_harness
from tests.conformance.sqlite_harness import open_sqlite_harness

HarnessFactory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[StoreHarness]]

HARNESSES: dict[str, HarnessFactory] = {
    "memory": open_memory_harness,
    "postgres": open_pg_harness,
    "sqlite": open_sqlite_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[StoreHarness]:
    async with HARNESSES[request.param](request) as opened:
        yield opened


RequestHarnessFactory = Callable[
    [pytest.FixtureRequest], AbstractAsyncContextManager[RequestHarness]
]

REQUEST_HARNESSES: dict[str, RequestHarnessFactory] = {
    "postgres": open_pg_harness,
    "sqlite": open_sqlite_harness,
}
"""The stores with trigger-now and backfill requests: the cluster's and the Edge's."""


@pytest.fixture(params=sorted(REQUEST_HARNESSES))
async def request_harness(request: pytest.FixtureRequest) -> AsyncIterator[RequestHarness]:
    async with REQUEST_HARNESSES[request.param](request) as opened:
        yield opened


OVERLAP_HARNESSES: dict[
    str, Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[OverlapHarness]]
] = {
    "postgres": open_pg_harness,
    "sqlite": open_sqlite_harness,
}
"""The stores with the overlap policy and the start deadline: the cluster's and the Edge's."""


@pytest.fixture(params=sorted(OVERLAP_HARNESSES))
async def overlap_harness(request: pytest.FixtureRequest) -> AsyncIterator[OverlapHarness]:
    async with OVERLAP_HARNESSES[request.param](request) as opened:
        yield opened
