"""Which tasks a worker claims: what it can run, narrowed by ``WorkerConfig.tasks``."""

from __future__ import annotations

from typing import Any

import pytest

from qlsched.worker import WorkerConfig, WorkerMetrics
from qlsched.worker.service import _Worker


async def _handler(ctx: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("run_commands", "handlers", "tasks", "expected"),
    [
        (True, [], None, None),  # `qlsched work`: every task
        (True, [], ("p/b", "p/a"), ["p/a", "p/b"]),  # `work --task`
        (False, ["p/b", "p/a"], None, ["p/a", "p/b"]),  # embedded: its handlers'
        (False, ["p/a", "p/b"], ("p/b", "p/c"), ["p/b"]),  # handlers it was asked for
        (False, ["p/a"], ("p/c",), []),  # none: it claims nothing
    ],
)
def test_a_worker_claims_the_tasks_it_can_run_and_was_asked_for(
    run_commands: bool, handlers: list[str], tasks: tuple[str, ...] | None, expected: Any
) -> None:
    config = WorkerConfig(dsn="postgresql://unused", run_commands=run_commands, tasks=tasks)
    w = _Worker(config, None, dict.fromkeys(handlers, _handler), WorkerMetrics(), print)  # type: ignore[arg-type]
    assert w.tasks() == expected
