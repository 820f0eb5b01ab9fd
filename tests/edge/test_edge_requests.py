"""Trigger-now and backfill on the Edge (issue #32): ``edge trigger`` and ``edge backfill`` as
the cluster's commands (flags, lines, exit codes), admitted by ``edge run`` after each
round. The behaviour both profiles share is the conformance suite's
(``tests/conformance/test_request_conformance.py``); this file holds what is the Edge's own:
the commands as subprocesses, the runner's budget per round, and ``edge status``."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qlsched.core.control import TriggerRef
from qlsched.core.keys import idempotency_key
from qlsched.core.requests import Recorded, RequestAsk
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.edge.scheduler import EdgeScheduler
from qlsched.edge.settings import EdgeSettings
from qlsched.sqlite import control
from qlsched.sqlite.database import EdgeDatabase
from qlsched.sqlite.publish import publish
from qlsched.sqlite.request_record import record_request
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import (
    AUDIT_BAD_RUNS,
    clocked_edge,
    publish_file,
    qlsched,
    read,
    start_run,
    wait_ready,
    wait_until,
)
from tests.support.memory_sink import MemorySink

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND = 1_000
REQUEST = re.compile(r"request ([0-9a-f-]{36}) recorded")


# --- the commands, as an operator runs them ---------------------------------------------------


def test_edge_trigger_and_backfill_answer_as_the_cluster_commands(tmp_path: Path) -> None:
    """Each command prints one line naming its request (and a backfill its exact count)
    and exits 0; bad input is one line and exit 2 (before anything is recorded); a
    disabled trigger is refused with exit 1. Each recorded request has its audit row."""
    db = str(tmp_path / "edge.sqlite3")
    toml = tmp_path / "a.toml"
    assert qlsched("edge", "publish", str(publish_file(toml, 2, cron="*/5 * * * *")), "--db", db)
    ref = "edge/t000000"

    now = qlsched("edge", "trigger", ref, "--db", db, "--note", "after restore")
    back = qlsched(
        "edge", "backfill", ref, "--from", "2025-01-01", "--to", "2025-01-01T01:00", "--db", db
    )

    assert (now.returncode, back.returncode) == (0, 0), (now.stderr, back.stderr)
    assert now.stdout.startswith(f"trigger {ref}: request ")
    assert "edge run admits it (qlsched edge status shows it)" in now.stdout
    assert back.stdout.startswith(f"backfill {ref}: request ")
    assert "recorded for 13 occurrences from 2025-01-01T00:00:00+00:00" in back.stdout
    assert len(now.stdout.splitlines()) == len(back.stdout.splitlines()) == 1
    ids = {m.group(1) for m in REQUEST.finditer(now.stdout + back.stdout)}
    assert {str(r[0]) for r in read(Path(db), "SELECT request_id FROM control_requests")} == ids
    assert read(Path(db), "SELECT kind, occurrences, note FROM schedule_actions ORDER BY 1") == [
        ("backfill", 13, None),
        ("trigger", 1, "after restore"),
    ]

    bad = {
        "malformed": ("edge", "trigger", "nope", "--db", db),
        "unknown": ("edge", "trigger", "edge/missing", "--db", db),
        "not iso": ("edge", "backfill", ref, "--from", "soon", "--to", "2025-01-02", "--db", db),
        "backwards": ("edge", "backfill", ref, "--from", "2025-01-02", "--to", "2025-01-01"),
        "future": ("edge", "backfill", ref, "--from", "2025-01-01", "--to", "2999-01-01"),
        "too many": ("edge", "backfill", ref, "--from", "2024-01-01", "--to", "2025-01-01"),
        "max": (
            "edge",
            "backfill",
            ref,
            "--from",
            "2025-01-01",
            "--to",
            "2025-01-02",
            "--max",
            "0",
        ),
    }
    for what, args in bad.items():
        result = qlsched(*args, "--db", db)
        assert result.returncode == 2, (what, result.stdout, result.stderr)
        assert result.stdout == "", what
        assert len(result.stderr.splitlines()) == 1, (what, result.stderr)
        assert "Traceback" not in result.stderr
    too_many = qlsched(*bad["too many"], "--db", db)
    assert "the range holds 105,409 occurrences, more than --max 10,000" in too_many.stderr
    assert len(read(Path(db), "SELECT * FROM control_requests")) == 2

    publish_file(toml, 1, cron="*/5 * * * *")
    assert qlsched("edge", "publish", str(toml), "--db", db, "--prune").returncode == 0
    disabled = qlsched("edge", "trigger", "edge/t000001", "--db", db)
    assert disabled.returncode == 1
    assert disabled.stderr.strip().endswith("refused: the trigger is disabled")


def test_edge_run_admits_requests_and_edge_status_shows_them(tmp_path: Path) -> None:
    """Beside a running ``edge run``: a trigger-now becomes its Run, a backfill is admitted
    to the last occurrence, and a paused trigger's request is held (shown so) until
    ``edge resume``, while the other trigger's Runs show rounds went on."""
    db = tmp_path / "edge.sqlite3"
    toml = publish_file(tmp_path / "a.toml", 2, cron="* * * * * *")
    assert qlsched("edge", "publish", str(toml), "--db", str(db)).returncode == 0
    assert qlsched("edge", "pause", "edge/t000001", "--db", str(db)).returncode == 0
    proc = start_run(db, "--cadence-ms", "100", "--summary", "0")
    try:
        wait_ready(proc)
        assert qlsched("edge", "trigger", "edge/t000000", "--db", str(db)).returncode == 0
        held = qlsched("edge", "trigger", "edge/t000001", "--db", str(db), "--actor", "ops")
        assert held.returncode == 0
        back = qlsched(
            "edge", "backfill", "edge/t000000", "--from", "2025-01-01T00:00:00",
            "--to", "2025-01-01T00:00:09", "--db", str(db),
        )  # fmt: skip
        assert back.returncode == 0, back.stderr
        manual = "SELECT count(*) FROM runs WHERE idempotency_key LIKE 'ql3:manual:%'"

        def served() -> bool:
            done = read(db, "SELECT count(*) FROM control_requests WHERE state = 'done'")
            return done == [(2,)] and read(db, manual) == [(1,)]

        wait_until(served, what="the trigger-now and the backfill admitted")
        mark = read(db, "SELECT count(*) FROM runs WHERE trigger_id = 't000000'")[0][0]
        wait_until(
            lambda: (
                read(db, "SELECT count(*) FROM runs WHERE trigger_id = 't000000'")[0][0]
                > int(str(mark)) + 2
            ),
            what="rounds after the requests",
        )
        status = qlsched("edge", "status", "--db", str(db))
        assert "request trigger edge/t000001 held (trigger paused; runs after resume)" in (
            status.stdout
        )
        assert "by ops" in status.stdout
        assert "request backfill edge/t000000 done 10/10 (admitted 10, already admitted 0)" in (
            status.stdout
        )
        assert read(db, "SELECT count(*) FROM runs WHERE trigger_id = 't000001'") == [(0,)]

        assert qlsched("edge", "resume", "edge/t000001", "--db", str(db)).returncode == 0
        wait_until(lambda: read(db, manual) == [(2,)], what="the held request after resume")
        report = json.loads(qlsched("edge", "status", "--db", str(db), "--json").stdout)
        assert {(q["kind"], q["state"], q["held"]) for q in report["requests"]} == {
            ("trigger", "done", False),
            ("backfill", "done", False),
        }
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert read(db, AUDIT_BAD_RUNS) == []
    dupes = "SELECT idempotency_key FROM runs GROUP BY 1 HAVING count(*) > 1"
    assert read(db, dupes) == []


# --- the runner's round, with a fixed clock --------------------------------------------------


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[EdgeDatabase, list[int]]]:
    async with clocked_edge(tmp_path, T0) as opened:
        yield opened


def spec(*ids: str, misfire: str = "skip") -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command="true")],
        triggers=[
            TriggerEntry(project="p", id=i, task="job", cron="* * * * * *", misfire=misfire)  # type: ignore[arg-type]
            for i in ids
        ],
    )


async def record(
    db: EdgeDatabase, trigger_id: str, span: tuple[int, int] | None = None
) -> Recorded:
    ref = TriggerRef("p", trigger_id)
    result = await db.call(
        lambda conn: record_request(
            conn,
            ref,
            db.clock(),
            RequestAsk(
                kind="trigger" if span is None else "backfill",
                span=span,
                max_occurrences=None if span is None else 10_000,
            ),
        )
    )
    assert isinstance(result, Recorded)
    return result


def admitted(db: EdgeDatabase) -> list[tuple[object, ...]]:
    return read(Path(db.path), "SELECT kind, state, admitted FROM control_requests ORDER BY rowid")


async def test_a_round_admits_at_most_its_budget_trigger_now_first(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """With a budget of four, a round serves its due row, then the trigger-now recorded
    last, then shares the rest between two large backfills; the next rounds go on the same
    way (a large window never stalls the runner), and each occurrence has one Run."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec("a", "b"), now[0]))
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(claim_budget=4), MemorySink())
    await scheduler.run_round()  # initialise: both cursors at T0 + 1 s
    now[0] = T0 + 100 * SECOND
    await scheduler.run_round()  # far behind: the skip policy moves both cursors on
    for trigger_id, span in (("a", (T0 - 50 * SECOND, T0 - SECOND)), ("b", (T0, T0 + 40 * SECOND))):
        await record(db, trigger_id, span)
        now[0] += 1  # recorded in this order (first come, first served)
    await record(db, "a")

    now[0] += SECOND
    stats = await scheduler.run_round()

    assert stats.admitted == 2  # the due rows, as always
    assert admitted(db) == [
        ("backfill", "pending", 1),
        ("backfill", "pending", 2),
        ("trigger", "done", 1),
    ]
    for _ in range(3):
        now[0] += SECOND
        await scheduler.run_round()
    assert admitted(db) == [
        ("backfill", "pending", 1 + 6),
        ("backfill", "pending", 2 + 6),
        ("trigger", "done", 1),
    ]
    dupes = "SELECT idempotency_key FROM runs GROUP BY 1 HAVING count(*) > 1"
    assert read(Path(db.path), dupes) == []


async def test_a_backfill_of_a_pause_never_wedges_a_fire_once_resume(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """The cluster's wedge, on the Edge: paused before its first round (no cursor), a
    trigger gets a backfill of the pause; it is held. ``resume --catch-up fire_once`` puts
    the cursor on the pause's latest occurrence; cron admits it and goes on firing, and the
    backfill admits only what lies before the cursor: one Run per key, no failed write."""
    db, now = edge
    await db.call(lambda conn: publish(conn, spec("t", misfire="fire_once"), now[0]))
    ref = TriggerRef("p", "t")
    await db.call(lambda conn: control.pause(conn, ref, now[0], note=None, actor=None))
    sink = MemorySink()
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), sink)
    now[0] = T0 + 5 * SECOND
    await record(db, "t", (T0, T0 + 4 * SECOND))
    await scheduler.run_round()
    assert read(Path(db.path), "SELECT count(*) FROM runs") == [(0,)]

    await db.call(lambda conn: control.resume(conn, ref, now[0], catch_up="fire_once", actor=None))
    for _ in range(3):
        await scheduler.run_round()
        now[0] += SECOND

    keys = [str(r[0]) for r in read(Path(db.path), "SELECT idempotency_key FROM runs")]
    assert len(keys) == len(set(keys))
    assert idempotency_key("t", 1, T0 + 5 * SECOND) in keys  # cron's, fired once
    assert idempotency_key("t", 1, T0 + 7 * SECOND) in keys  # cron goes on
    assert idempotency_key("t", 1, T0 + SECOND) in keys  # the backfill's, before it
    assert admitted(db) == [("backfill", "done", 5)]
    assert [d for d in sink.items if d.code in ("store_failed", "request_failed")] == []
