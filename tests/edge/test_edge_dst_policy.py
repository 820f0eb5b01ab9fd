"""The DST policy on the Edge profile (docs/contract.md §3; docs/contract.md §12): the same trigger
fields, stored in the same columns, read back by the round, decided by the same core; an
Edge file made before the policy existed is upgraded with the defaults.

The Edge clock is injected, so these rounds run at chosen instants of a real New York fold.
"""

from __future__ import annotations

import io
import sqlite3
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from qlsched.commands.edge.status import render
from qlsched.core.keys import idempotency_key
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.edge.scheduler import EdgeScheduler, EdgeSettings
from qlsched.sqlite.database import EdgeDatabase, open_checked
from qlsched.sqlite.publish import PublishResult, publish
from qlsched.sqlite.status import read_status
from qlsched.sqlite.store import SqliteStore
from tests.edge.support import OLD_EXECUTION, clocked_edge, file_before, read
from tests.support.memory_sink import MemorySink

NY = ZoneInfo("America/New_York")
FIRST = int(datetime(2026, 11, 1, 1, 30, tzinfo=NY).timestamp()) * 1000  # 05:30Z
SECOND = int(datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=NY).timestamp()) * 1000  # 06:30Z
NEXT_DAY = int(datetime(2026, 11, 2, 1, 30, tzinfo=NY).timestamp()) * 1000


def spec_file(gap: str = "shift", fold: str = "first") -> PublishFile:
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command="true")],
        triggers=[
            TriggerEntry(
                project="p",
                id="g",
                task="job",
                cron="30 1 * * *",
                timezone=NY.key,
                dst_gap=gap,  # type: ignore[arg-type]
                dst_fold=fold,  # type: ignore[arg-type]
            )
        ],
    )


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[EdgeDatabase, list[int]]]:
    async with clocked_edge(tmp_path, FIRST - 3_600_000) as opened:
        yield opened


async def _publish(
    db: EdgeDatabase, now: list[int], spec: PublishFile, *, prune: bool = False
) -> PublishResult:
    return await db.call(lambda conn: publish(conn, spec, now[0], prune=prune))


async def test_publish_round_trip_keeps_the_policy(edge: tuple[EdgeDatabase, list[int]]) -> None:
    """Rule: an Edge publish stores ``dst_gap``/``dst_fold`` in the trigger's row, the round's
    read hands them to the decision, another policy is a new revision, and the same file
    again changes nothing."""
    db, now = edge
    assert (await _publish(db, now, spec_file("skip", "last"))).triggers == {"p/g": "added"}
    path = Path(db.path)
    assert read(path, "SELECT revision, dst_gap, dst_fold FROM triggers") == [(1, "skip", "last")]
    [claim] = await SqliteStore(db).claim("edge", 1, 30_000)
    assert (claim.dst_gap, claim.dst_fold) == ("skip", "last")

    assert (await _publish(db, now, spec_file("skip", "both"))).triggers == {"p/g": "changed"}
    assert read(path, "SELECT revision, dst_gap, dst_fold FROM triggers") == [(2, "skip", "both")]
    assert read(path, "SELECT trigger_revision, next_fire_at_ms FROM trigger_schedules") == [
        (2, None)
    ]
    assert (await _publish(db, now, spec_file("skip", "both"))).triggers == {"p/g": "unchanged"}


@pytest.mark.parametrize(
    ("fold", "expected"),
    [("first", [FIRST]), ("last", [SECOND]), ("both", [FIRST, SECOND])],
)
async def test_rounds_through_a_fold_follow_the_policy(
    edge: tuple[EdgeDatabase, list[int]], fold: str, expected: list[int]
) -> None:
    """Rule: the Edge scheduler's rounds at New York's 2026 fall-back admit 01:30 at its
    first instant, its second, or both (two Runs, two keys), as core decides."""
    db, now = edge
    await _publish(db, now, spec_file(fold=fold))
    scheduler = EdgeScheduler(SqliteStore(db), EdgeSettings(), MemorySink())
    await scheduler.run_round()  # initialize the cursor, an hour before the fold
    for instant in (FIRST, SECOND, NEXT_DAY - 1):
        now[0] = instant
        await scheduler.run_round()
    path = Path(db.path)
    runs = read(path, "SELECT scheduled_for_ms, idempotency_key FROM runs ORDER BY 1")
    assert runs == [(t, idempotency_key("g", 1, t)) for t in expected]
    assert read(path, "SELECT next_fire_at_ms FROM trigger_schedules") == [(NEXT_DAY,)]


def test_an_edge_file_from_before_the_policy_gets_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: an Edge file migrated before 0005, holding a trigger, opens with this version:
    0005 is applied, the trigger gets ``shift``/``first`` (the rule it ran under), and the
    catalog check passes."""
    path = file_before(tmp_path, monkeypatch, keep=("0001_",))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO triggers (project_id, trigger_id, revision, cron, task_id, task_revision,"
            " execution_revision_id, content_digest, created_at_ms, updated_at_ms) VALUES"
            " ('p', 'g', 1, '30 1 * * *', 'job', 1, ?, printf('%064d', 3), 0, 0)",
            (OLD_EXECUTION,),
        )
    finally:
        conn.close()
    assert "dst_gap" not in {r[1] for r in read(Path(path), "PRAGMA table_info(triggers)")}

    open_checked(path, create=False, apply=True).close()

    assert read(Path(path), "SELECT trigger_id, dst_gap, dst_fold FROM triggers") == [
        ("g", "shift", "first")
    ]
    assert read(Path(path), "SELECT count(*) FROM schema_migrations WHERE version = 5") == [(1,)]


async def test_prune_and_repin_keep_the_policy(edge: tuple[EdgeDatabase, list[int]]) -> None:
    """Rule: an Edge trigger published again from its stored row (re-pinned by a changed
    task, then disabled by ``prune``) keeps its DST policy."""
    db, now = edge
    await _publish(db, now, spec_file("skip", "both"))
    task_changed = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="job", command="false")],
    )
    assert (await _publish(db, now, task_changed)).triggers == {"p/g": "repinned"}
    assert (await _publish(db, now, task_changed, prune=True)).triggers == {"p/g": "disabled"}
    assert read(Path(db.path), "SELECT revision, enabled, dst_gap, dst_fold FROM triggers") == [
        (3, 0, "skip", "both")
    ]


async def test_edge_status_names_a_non_default_policy(
    edge: tuple[EdgeDatabase, list[int]],
) -> None:
    """Rule: ``edge status`` names a trigger's policy beside its zone (``status``'s table)
    when it is not the default, and its JSON rows carry both fields."""
    db, now = edge
    await _publish(db, now, spec_file("skip", "first"))
    report = await db.call(lambda conn: read_status(conn, db.path, now[0]))
    out = io.StringIO()
    render(report, out)
    [line] = [line for line in out.getvalue().splitlines() if line.startswith("p/")]
    assert "dst_gap=skip" in line.split()
    [row] = report.schedules
    assert (row.dst_gap, row.dst_fold) == ("skip", "first")
