"""``qlsched pause`` and ``qlsched resume`` as an operator runs them (subprocesses, the admin
DSN): one line on stdout per outcome and exit 0, a no-op included; bad input is one line on
stderr and exit 2, never a traceback (README "Exit codes")."""

from __future__ import annotations

import pytest

from tests.integration.cluster_support import PROJECT, publish_triggers, trigger
from tests.integration.schema_support import fetch, run_cli
from tests.support.pg import TestDatabase


def _cli(*args: str) -> tuple[int, str, str]:
    result = run_cli(list(args))
    return result.returncode, result.stdout, result.stderr


async def test_pause_and_resume_say_what_they_did_and_when_nothing_changed(
    pg_db: TestDatabase,
) -> None:
    """Rule: pause, pause again, resume, resume again: exit 0 each, one stdout line each
    (paused / already paused / resumed with its counts / not paused), and exactly two audit
    rows carrying the note and the --actor label."""
    await publish_triggers(pg_db, [trigger("t")])
    dsn = ("--dsn", pg_db.admin_dsn)
    ref = f"{PROJECT}/t"

    outputs = [
        _cli("pause", ref, "--note", "vendor outage", "--actor", "alice", *dsn),
        _cli("pause", ref, *dsn),
        _cli("resume", ref, "--catch-up", "fire_once", "--actor", "bob", *dsn),
        _cli("resume", ref, *dsn),
    ]

    assert [code for code, _, _ in outputs] == [0, 0, 0, 0], outputs
    assert [err for _, _, err in outputs] == ["", "", "", ""]
    lines = [out.splitlines() for _, out, _ in outputs]
    assert all(len(x) == 1 for x in lines), lines
    assert lines[0][0].startswith(f"paused {ref} at ")
    assert lines[0][0].endswith("(note: vendor outage)")
    assert lines[1][0].startswith(f"{ref} is already paused (since ")
    assert lines[1][0].endswith("(note: vendor outage): nothing changed")
    assert lines[2][0].startswith(f"resumed {ref} at ")
    assert lines[3][0] == f"{ref} is not paused: nothing changed"
    rows = fetch(
        pg_db.superuser_dsn,
        "SELECT kind, note, actor, actor_label FROM qlsched.schedule_actions ORDER BY action_id",
    )
    assert [tuple(r) for r in rows] == [
        ("pause", "vendor outage", "qlsched_admin", "alice"),
        ("resume", None, "qlsched_admin", "bob"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("pause", "p/nope"), "qlsched pause: no trigger p/nope", id="unknown"),
        pytest.param(("resume", "q/t"), "qlsched resume: no trigger q/t", id="unknown-project"),
        pytest.param(
            ("pause", "p-t"), 'qlsched pause: "p-t" is not PROJECT/TRIGGER', id="malformed"
        ),
        pytest.param(
            ("pause", "p/t", "--note", "x" * 1001),
            "qlsched pause: note: longer than 1000 characters",
            id="note-too-long",
        ),
    ],
)
async def test_bad_input_is_one_line_and_exit_2(
    pg_db: TestDatabase, args: tuple[str, ...], message: str
) -> None:
    """Rule: an unknown or malformed trigger reference, or a note over the limit, is one
    line on stderr naming it, exit 2, and records nothing."""
    await publish_triggers(pg_db, [trigger("t")])
    code, out, err = _cli(*args, "--dsn", pg_db.admin_dsn)
    assert (code, out) == (2, "")
    assert err.startswith(message), err
    assert len(err.splitlines()) == 1, err
    assert fetch(pg_db.superuser_dsn, "SELECT 1 FROM qlsched.schedule_actions") == []


async def test_the_wrong_role_is_named(pg_db: TestDatabase) -> None:
    """Rule: pause and resume need the admin role: an observer DSN is named, exit 2."""
    await publish_triggers(pg_db, [trigger("t")])
    code, _, err = _cli("resume", f"{PROJECT}/t", "--dsn", pg_db.observer_dsn)
    assert code == 2
    assert err == (
        "qlsched resume: this DSN logs in as qlsched_observer; resume needs qlsched_admin\n"
    )
