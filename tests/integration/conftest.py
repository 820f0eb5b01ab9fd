"""The adapter tests' shared fixture: ``env``, one test's database, store and access
(``adapter_support.open_env``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.adapter_support import Env, open_env
from tests.support.pg import TestDatabase


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened
