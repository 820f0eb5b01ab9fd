"""Seeing what the worker did (docs/contract.md §13): ``status`` shows each trigger's last
outcome and duration and the running and failed counts, ``/v1/schedules``'s reader carries
the last outcome, and ``qlsched runs`` lists Runs with their Attempts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import trio

from qlsched.core.work import JobResult
from qlsched.postgres import worker
from qlsched.postgres.reader import open_reader
from tests.integration.adapter_support import Env, open_env
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase
from tests.worker.support import admitted, claim, worker_db


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened


async def finished_pair(env: Env) -> tuple[str, str, str]:
    """Three Runs on t0000..t0002: one succeeded, one failed (exit 3), one still running."""
    await admitted(env, 3)
    async with worker_db(env) as db:
        ok, bad, busy = sorted(await claim(db), key=lambda c: c.trigger_id)
        await worker.finish(
            db,
            attempt_id=ok.attempt_id,
            lease_token=ok.lease_token,
            result=JobResult(end="succeeded", code="succeeded", exit_code=0),
        )
        await worker.finish(
            db,
            attempt_id=bad.attempt_id,
            lease_token=bad.lease_token,
            result=JobResult(end="failed", code="exit_nonzero", exit_code=3),
        )
    return ok.run_id, bad.run_id, busy.run_id


async def test_status_shows_last_outcomes_and_counts(env: Env) -> None:
    """Rule: `status --json` gives each trigger's last finished outcome and duration and the
    counts of running and failed Runs; the text says the same in its own lines."""
    await finished_pair(env)
    out = await trio.to_thread.run_sync(run_cli, ["status", "--json", "--dsn", env.db.observer_dsn])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["runs_running"], report["runs_failed"]) == (1, 1)
    rows = {r["trigger_id"]: r for r in report["schedules"]}
    assert rows["t0000"]["last_outcome"] == "succeeded"
    assert rows["t0000"]["last_duration_ms"] >= 0
    assert rows["t0001"]["last_outcome"] == "failed"
    assert rows["t0002"]["last_outcome"] is None
    text = await trio.to_thread.run_sync(run_cli, ["status", "--dsn", env.db.observer_dsn])
    assert "runs: 1 running, 1 failed" in text.stdout
    assert "last run p/t0000: succeeded in" in text.stdout


async def test_v1_schedules_reader_carries_the_last_outcome(env: Env) -> None:
    """Rule: the reader behind /v1/schedules (runtime role) gives each row's last outcome."""
    await finished_pair(env)
    async with open_reader(env.db.runtime_dsn) as reader:
        views = {v.trigger_id: v for v in await reader.list_schedules()}
        after = {v.trigger_id: v for v in await reader.list_schedules_after(("p", "t0000"))}
    assert views["t0001"].last_outcome == "failed"
    assert after["t0001"].last_outcome == "failed"
    assert views["t0002"].last_outcome is None


async def test_runs_lists_runs_with_their_attempts(env: Env) -> None:
    """Rule: `qlsched runs` lists the latest Runs with their Attempts, filtered by trigger
    and state; --json is one object per Run; a bad state is bad input (exit 2)."""
    ok, bad, busy = await finished_pair(env)
    out = await trio.to_thread.run_sync(
        run_cli, ["runs", "p", "--json", "--dsn", env.db.observer_dsn]
    )
    assert out.returncode == 0, out.stderr
    runs = {r["run_id"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert {runs[ok]["state"], runs[bad]["state"], runs[busy]["state"]} == {
        "succeeded",
        "failed",
        "running",
    }
    assert runs[bad]["attempts"][0]["exit_code"] == 3
    assert runs[bad]["attempts"][0]["error"] == "exit_nonzero"
    failed = await trio.to_thread.run_sync(
        run_cli, ["runs", "p/t0001", "--state", "failed", "--dsn", env.db.observer_dsn]
    )
    assert failed.stdout.splitlines()[0].startswith(f"{bad} p/t0001 failed")
    assert "attempt 1 failed exit 3 (exit_nonzero) by w1" in failed.stdout
    wrong = await trio.to_thread.run_sync(
        run_cli, ["runs", "--state", "done", "--dsn", env.db.observer_dsn]
    )
    assert wrong.returncode == 2
    assert "one of held, queued, running" in wrong.stderr
