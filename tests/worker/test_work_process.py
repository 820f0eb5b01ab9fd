"""``qlsched work`` as a real process on real PostgreSQL (docs/contract.md §13): jobs run as
child processes with the Run's identity in their environment; a timeout kills the job;
cancel stops queued and running Runs; a SIGKILLed worker's Attempt is lost and retried; a
SIGSTOPped worker past its lease cannot finish. Faults are real signals to real pids."""

from __future__ import annotations

import re
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from qlsched.core.outcomes import Admitted
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from tests.integration.adapter_support import LEASE_MS, Env, fire_for, open_env, trigger
from tests.integration.schema_support import run_cli
from tests.support.exposition import profile_problems
from tests.support.pg import TestDatabase
from tests.worker.proc_support import WorkerProcess, kill_if_alive, pid_alive
from tests.worker.support import admitted, attempts, events, run_row, wait_until

PY = sys.executable


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened


def task(command: str, **fields: object) -> TaskEntry:
    return TaskEntry(project="p", id="task", command=command, **fields)  # type: ignore[arg-type]


def script(tmp_path: Path, body: str) -> str:
    """A job as a Python file (argv split, no shell): ``python FILE``."""
    path = tmp_path / "job.py"
    path.write_text("import os, sys, time, pathlib\n" + body)
    return f"{PY} {path}"


async def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    """Poll a condition of this machine (a file, a log line) until it holds."""
    with trio.fail_after(timeout_s):
        while True:
            if check():
                return
            await trio.sleep(0.05)


async def wait_run_state(env: Env, run_id: str, state: str, timeout_s: float = 30) -> None:
    await wait_until(
        env,
        "SELECT state = $2 FROM qlsched.runs WHERE run_id = $1",
        run_id,
        state,
        timeout_s=timeout_s,
    )


async def test_work_runs_each_job_once_with_its_identity(env: Env, tmp_path: Path) -> None:
    """Rule: the worker runs each queued Run's command once as a child (argv, no shell),
    with QLSCHED_RUN_ID, QLSCHED_IDEMPOTENCY_KEY, QLSCHED_SCHEDULED_FOR and QLSCHED_ATTEMPT
    in its environment and none of the worker's QLSCHED_* settings; the exit code and the
    output tail are kept; SIGTERM stops it with exit 0."""
    seen = tmp_path / "seen"
    job = script(
        tmp_path,
        f"line = ' '.join(os.environ.get(k, '-') for k in ('QLSCHED_RUN_ID',"
        f" 'QLSCHED_IDEMPOTENCY_KEY', 'QLSCHED_SCHEDULED_FOR', 'QLSCHED_ATTEMPT',"
        f" 'QLSCHED_WORKER_DSN'))\n"
        f"open({str(seen)!r}, 'a').write(line + '\\n')\nprint('hello from', line)\n",
    )
    runs = await admitted(env, 3, task(job))
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path)
    try:
        await w.start()
        for r in runs:
            await wait_run_state(env, str(r.run_id), "succeeded")
    finally:
        code = await w.stop()
    assert code == 0, w.log()
    lines = seen.read_text().splitlines()
    assert len(lines) == 3
    by_run = {line.split()[0]: line.split() for line in lines}
    for r in runs:
        run_id, key, scheduled, attempt, dsn = by_run[str(r.run_id)]
        row = await run_row(env, str(r.run_id))
        assert key == row["idempotency_key"]
        assert scheduled.startswith("20")
        assert scheduled.endswith("+00:00")
        assert (attempt, dsn) == ("1", "-")
        [a] = await attempts(env, run_id)
        assert (a["exit_code"], a["result"]) == (0, "succeeded")
        assert a["output_tail"].startswith("hello from " + run_id)
        assert await events(env, run_id) == [
            "run.created",
            "run.queued",
            "run.running",
            "run.succeeded",
        ]


async def test_a_worker_of_one_task_leaves_the_others_queued(env: Env, tmp_path: Path) -> None:
    """Rule: `work --task p/b` runs b's Runs and leaves every other task's queued, older or
    not (its claim is the task-filtered statement)."""
    tasks = [TaskEntry(project="p", id=t, command="true") for t in ("a", "b")]
    ids = {"a": ["a1", "a2"], "b": ["b1", "b2"]}
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=tasks,
            triggers=[trigger("p", i, task=t) for t, names in ids.items() for i in names],
        )
    )
    await env.make_due()
    claims = await env.store.claim("r1", 4, LEASE_MS)
    outcomes = await env.store.admit([fire_for(c) for c in claims])
    runs = {o.trigger_id: str(o.run_id) for o in outcomes if isinstance(o, Admitted)}
    assert sorted(runs) == ["a1", "a2", "b1", "b2"]
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path, extra=["--task", "p/b"])
    try:
        await w.start()
        for name in ids["b"]:
            await wait_run_state(env, runs[name], "succeeded")
    finally:
        code = await w.stop()
    assert code == 0, w.log()
    assert "lease 3000 ms, only tasks p/b)" in w.log()
    for name in ids["a"]:
        assert (await run_row(env, runs[name]))["state"] == "queued"


async def test_timeout_kills_the_job(env: Env, tmp_path: Path) -> None:
    """Rule: a job past its task's timeout_ms is stopped (SIGTERM, then SIGKILL after the
    grace) and its Attempt fails with error `timeout`; the child is gone."""
    pidfile = tmp_path / "pid"
    job = script(
        tmp_path,
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\ntime.sleep(60)\n",
    )
    [run] = await admitted(env, 1, task(job, timeout_ms=1_000))
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path)
    try:
        await w.start()
        await wait_run_state(env, str(run.run_id), "failed")
    finally:
        await w.stop()
    [a] = await attempts(env, str(run.run_id))
    assert (a["state"], a["error"]) == ("failed", "timeout")
    assert not pid_alive(int(pidfile.read_text()))


async def test_cancel_queued_and_running(env: Env, tmp_path: Path) -> None:
    """Rule: `qlsched cancel` cancels a queued Run at once (no worker needed) and a running
    one through its worker at the next heartbeat: the child is stopped and the Run finished
    `cancelled`; both are audited in schedule_actions."""
    pidfile = tmp_path / "pid"
    job = script(
        tmp_path,
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\ntime.sleep(60)\n",
    )
    queued, running = await admitted(env, 2, task(job))
    out = run_cli(["cancel", str(queued.run_id), "--note", "not today", "--dsn", env.db.admin_dsn])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"cancelled run {queued.run_id}")
    assert (await run_row(env, str(queued.run_id)))["state"] == "cancelled"
    [qa] = await attempts(env, str(queued.run_id))
    assert qa["state"] == "cancelled"

    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path, lease_ms=3_000)
    try:
        await w.start()
        await wait_run_state(env, str(running.run_id), "running")
        await until(pidfile.exists)
        asked = await trio.to_thread.run_sync(
            run_cli, ["cancel", str(running.run_id), "--dsn", env.db.admin_dsn]
        )
        assert asked.returncode == 0, asked.stderr
        await wait_run_state(env, str(running.run_id), "cancelled")
    finally:
        await w.stop()
    assert not pid_alive(int(pidfile.read_text()))
    assert (await events(env, str(running.run_id)))[-2:] == [
        "run.cancel_requested",
        "run.cancelled",
    ]
    kinds = await env.su(
        "SELECT detail->>'run_id' AS run_id, note FROM qlsched.schedule_actions"
        " WHERE kind = 'cancel' ORDER BY action_id"
    )
    assert [(r["run_id"], r["note"]) for r in kinds] == [
        (str(queued.run_id), "not today"),
        (str(running.run_id), None),
    ]
    bad = run_cli(["cancel", "not-a-uuid", "--dsn", env.db.admin_dsn])
    assert bad.returncode == 2
    assert "expected a UUID" in bad.stderr


async def test_sigkilled_worker_attempt_is_lost_and_retried(env: Env, tmp_path: Path) -> None:
    """Rule: a worker SIGKILLed mid-job leaves its Attempt running until the lease expires;
    another worker then marks it lost and, under max_attempts 2, runs attempt 2, which
    succeeds: one Run, two Attempts, at least once."""
    pidfile = tmp_path / "pid"
    job = script(
        tmp_path,
        "if os.environ['QLSCHED_ATTEMPT'] == '1':\n"
        f"    pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
        "    time.sleep(60)\n",
    )
    [run] = await admitted(env, 1, task(job, max_attempts=2))
    a = WorkerProcess("wa", env.db.worker_dsn, tmp_path, lease_ms=2_000)
    b = WorkerProcess("wb", env.db.worker_dsn, tmp_path, lease_ms=2_000)
    try:
        await a.start()
        await until(pidfile.exists)
        await a.kill()
        await b.start()
        await wait_run_state(env, str(run.run_id), "succeeded")
    finally:
        await a.kill()
        await b.stop()
        if pidfile.exists():
            kill_if_alive(int(pidfile.read_text()))
    first, second = await attempts(env, str(run.run_id))
    assert (first["state"], first["worker_id"], first["error"]) == ("lost", "wa", "lease_expired")
    assert (second["state"], second["worker_id"]) == ("succeeded", "wb")
    assert "run.attempt_lost" in await events(env, str(run.run_id))


async def test_sigstopped_worker_past_its_lease_cannot_finish(env: Env, tmp_path: Path) -> None:
    """Rule: a worker stopped (SIGSTOP) past its lease wakes to a fence: its heartbeat and
    its finish are refused by the database clock, and the Attempt is not finished by it: it
    is marked lost (the retry policy, here max_attempts 1, fails the Run)."""
    donefile = tmp_path / "done"
    job = script(tmp_path, f"time.sleep(1)\npathlib.Path({str(donefile)!r}).write_text('x')\n")
    [run] = await admitted(env, 1, task(job))
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path, lease_ms=2_000)
    try:
        await w.start()
        await wait_run_state(env, str(run.run_id), "running")
        w.send(signal.SIGSTOP)
        [a] = await attempts(env, str(run.run_id))
        await env.wait_db_time(int(a["lease_expires_at_ms"]) + 500, timeout_s=20)
        w.send(signal.SIGCONT)
        await until(lambda: "finish refused" in w.log())
    finally:
        await w.stop()
    [a] = await attempts(env, str(run.run_id))
    # Not finished by the late worker: marked lost by a reap (its own next poll, here).
    assert (a["state"], a["error"]) == ("lost", "lease_expired")
    assert (await run_row(env, str(run.run_id)))["state"] == "failed"
    assert "run.succeeded" not in await events(env, str(run.run_id))


async def test_worker_metrics_count_claims_outcomes_and_retries(env: Env, tmp_path: Path) -> None:
    """Rule: `work --http` serves Prometheus metrics: claims, outcomes by code, job
    durations and retries, as the jobs happened (a failing job retried once, then failed);
    every series is labelled ``profile="cluster"``, as the replicas' are."""
    [run] = await admitted(env, 1, task(f"{PY} -c 'raise SystemExit(3)'", max_attempts=2))
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path, extra=["--http", "127.0.0.1:0"])
    try:
        await w.start()
        await wait_run_state(env, str(run.run_id), "failed")
        [address] = re.findall(r"metrics on (http://\S+)/metrics", w.log())
        text = await trio.to_thread.run_sync(_get, address + "/metrics")
    finally:
        await w.stop()
    assert 'qlsched_worker_claims_total{profile="cluster"} 2.0' in text
    assert 'qlsched_worker_outcomes_total{code="exit_nonzero",profile="cluster"} 2.0' in text
    assert 'qlsched_worker_retries_total{profile="cluster"} 1.0' in text
    assert 'qlsched_worker_job_seconds_count{profile="cluster"} 2.0' in text
    assert profile_problems(text, "cluster") == []


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


async def test_sigterm_lets_jobs_finish_within_the_stop_timeout(env: Env, tmp_path: Path) -> None:
    """Rule: SIGTERM stops claiming at once; a job that ends within the stop timeout is
    finished as usual (succeeded) and the worker exits 0."""
    started = tmp_path / "started"
    job = script(tmp_path, f"pathlib.Path({str(started)!r}).write_text('x')\ntime.sleep(2)\n")
    [run] = await admitted(env, 1, task(job))
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path, lease_ms=10_000, stop_timeout_ms=8_000)
    try:
        await w.start()
        await until(started.exists)
        w.send(signal.SIGTERM)
        assert w.proc is not None
        with trio.fail_after(20):
            code = await w.proc.wait()
    finally:
        await w.stop()
    assert code == 0, w.log()
    assert (await run_row(env, str(run.run_id)))["state"] == "succeeded"


async def test_sigterm_past_the_stop_timeout_stops_jobs_and_leaves_leases(
    env: Env, tmp_path: Path
) -> None:
    """Rule: a job still running at the stop timeout is stopped (the child is gone) and
    not finished: its Attempt stays running under its lease, for the next worker to mark
    lost once it expires."""
    pidfile = tmp_path / "pid"
    job = script(
        tmp_path,
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\ntime.sleep(60)\n",
    )
    [run] = await admitted(env, 1, task(job))
    w = WorkerProcess("w1", env.db.worker_dsn, tmp_path, lease_ms=30_000, stop_timeout_ms=500)
    try:
        await w.start()
        await until(pidfile.exists)
        w.send(signal.SIGTERM)
        assert w.proc is not None
        with trio.fail_after(20):
            code = await w.proc.wait()
    finally:
        await w.stop()
        if pidfile.exists():
            kill_if_alive(int(pidfile.read_text()))
    assert code == 0, w.log()
    assert not pid_alive(int(pidfile.read_text()))
    [a] = await attempts(env, str(run.run_id))
    assert (a["state"], a["finished_at_ms"]) == ("running", None)
    assert a["lease_expires_at_ms"] > await env.now_ms()
