"""Ctrl-C and SIGTERM at random moments of every command (README "Exit codes"; issue #31
item 3): each ends within a bound, with exit 0 (done first, or stopped in order), 1, 3 or
130, ``qlsched`` lines only: no traceback, no crash (a signal death such as 139 is a
failure), and the next command on the same database or file works.

The moments are drawn from a seeded generator between 0.15 s (past the interpreter's own
start, which is Python's: ``test_interrupts._before_qlsched``) and 1.5 s, so they fall
while modules load, while the command connects, and while it works.
"""

from __future__ import annotations

import random
import signal
import socket
import uuid
from pathlib import Path

import pytest
import trio

from tests.faults.test_interrupts import REPO, _assert_clean, _before_qlsched, _interrupt
from tests.integration.cluster_support import PROJECT, publish_triggers, trigger
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase

pytestmark = pytest.mark.slow

TRIES = 3
EXAMPLE = str(REPO / "examples" / "triggers.toml")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_commands(db: TestDatabase) -> dict[str, list[str]]:
    ref = f"{PROJECT}/t0"
    return {
        "status": ["status", "--dsn", db.observer_dsn],
        "check": ["check", "--dsn", db.runtime_dsn],
        "runs": ["runs", "--dsn", db.observer_dsn],
        "publish": ["publish", EXAMPLE, "--dsn", db.admin_dsn],
        "pause": ["pause", ref, "--dsn", db.admin_dsn],
        "resume": ["resume", ref, "--dsn", db.admin_dsn],
        "trigger": ["trigger", ref, "--dsn", db.admin_dsn],
        "backfill": [
            "backfill",
            ref,
            "--from",
            "2026-01-01T00:00",
            "--to",
            "2026-01-01T00:10",
            "--dsn",
            db.admin_dsn,
        ],
        "cancel": ["cancel", str(uuid.uuid4()), "--dsn", db.admin_dsn],
        "retention": ["retention", "show", "--dsn", db.observer_dsn],
        "next": ["next", "* * * * *", "-n", "5"],
        "migrate": ["migrate", "--dsn", db.superuser_dsn],
        "work": ["work", "--dsn", db.worker_dsn, "--stop-timeout-ms", "1000"],
        "ui": ["ui", "--dsn", db.observer_dsn, "--http", f"127.0.0.1:{_port()}"],
    }


def _edge_commands(file: Path) -> dict[str, list[str]]:
    db = ["--db", str(file)]
    return {
        "edge publish": ["edge", "publish", EXAMPLE, *db],
        "edge status": ["edge", "status", *db],
        "edge run": ["edge", "run", *db],
        "edge pause": ["edge", "pause", "demo/tick", *db],
        "edge trigger": ["edge", "trigger", "demo/tick", *db],
    }


def _interrupt_randomly(name: str, argv: list[str], rng: random.Random) -> list[str]:
    """``TRIES`` interrupts of ``argv``; the labels of the ones that landed in qlsched."""
    landed: list[str] = []
    for i in range(TRIES):
        sig = signal.SIGTERM if i == TRIES - 1 else signal.SIGINT
        after = rng.uniform(0.15, 1.5)
        second = rng.uniform(0, 0.08) if i == 1 else None
        code, err, took = _interrupt(argv, after_s=after, second_after_s=second, sig=sig)
        label = f"{name}: {sig.name} at {after:.2f} s (second {second})"
        if _before_qlsched(code, err):
            continue
        _assert_clean(label, code, err, took)
        landed.append(label)
    return landed


def test_every_cluster_command_stops_cleanly_at_random_moments(pg_db: TestDatabase) -> None:
    """Rule: every cluster command, interrupted at random moments (SIGINT once or twice,
    SIGTERM), ends within the bound, exit 0/1/3/130 with qlsched lines only; afterwards
    `check` is still ready and `status` still answers."""
    trio.run(publish_triggers, pg_db, [trigger("t0", cron="* * * * * *")])
    rng = random.Random(3131)
    landed: list[str] = []
    for command, argv in _cluster_commands(pg_db).items():
        landed += _interrupt_randomly(command, argv, rng)
    assert len(landed) >= 2 * len(_cluster_commands(pg_db)), landed
    ready = run_cli(["check", "--dsn", pg_db.runtime_dsn])
    assert ready.returncode == 0, ready.stderr
    assert run_cli(["status", "--dsn", pg_db.observer_dsn]).returncode == 0


def test_every_edge_command_stops_cleanly_at_random_moments(tmp_path: Path) -> None:
    """Rule: every Edge command, interrupted at random moments, ends within the bound, exit
    0/1/3/130 with qlsched lines only; the file then still publishes and answers status."""
    file = tmp_path / "edge.db"
    assert run_cli(["edge", "publish", EXAMPLE, "--db", str(file)]).returncode == 0
    rng = random.Random(3132)
    landed: list[str] = []
    for command, argv in _edge_commands(file).items():
        landed += _interrupt_randomly(command, argv, rng)
    assert len(landed) >= 2 * len(_edge_commands(file)), landed
    assert run_cli(["edge", "publish", EXAMPLE, "--db", str(file)]).returncode == 0
    assert run_cli(["edge", "status", "--db", str(file)]).returncode == 0
