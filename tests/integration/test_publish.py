"""Publish on PostgreSQL (admin role, one transaction): idempotence, revision bumps, prune,
archive, and hostile input (docs/contract.md §5 "Publish", §7 publish file).

"Changes nothing" is checked by ``xmin``: a publish that merely rewrote a row with the same
values would still give it a new one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from qlsched.core.outcomes import Admitted
from qlsched.core.specs import (
    COMMAND_MAX_BYTES,
    ProjectEntry,
    PublishFile,
    SpecError,
    TaskEntry,
    decode_publish_file,
)
from tests.integration.adapter_support import (
    LEASE_MS,
    Env,
    fire_for,
    one_project,
    run_round,
    trigger,
)

SNAPSHOT_SQL = {
    table: f"SELECT xmin::text AS xmin, t.* FROM qlsched.{table} AS t"  # noqa: S608
    for table in ("projects", "tasks", "execution_revisions", "triggers", "trigger_schedules")
}
"""Fixed table names only (S608 is about interpolated input, and there is none)."""


async def snapshot(env: Env) -> dict[str, list[dict[str, Any]]]:
    """Every row of the spec tables, with xmin, in a stable order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table, sql in SNAPSHOT_SQL.items():
        out[table] = sorted((dict(r) for r in await env.su(sql)), key=repr)
    return out


def two_tasks() -> PublishFile:
    """Project p: task ``a`` (triggers a1, a2), task ``b`` (trigger b1, fire_once, zone)."""
    return PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[
            TaskEntry(project="p", id="a", command="echo a"),
            TaskEntry(project="p", id="b", command="echo b"),
        ],
        triggers=[
            trigger("p", "a1", task="a"),
            trigger("p", "a2", task="a", cron="*/5 * * * *"),
            trigger(
                "p",
                "b1",
                task="b",
                cron="0 3 * * *",
                timezone="Asia/Shanghai",
                misfire="fire_once",
                misfire_grace_ms=5_000,
            ),
        ],
    )


def with_command(spec: PublishFile, task_id: str, command: str) -> PublishFile:
    tasks = [
        msgspec.structs.replace(t, command=command) if t.id == task_id else t for t in spec.tasks
    ]
    return msgspec.structs.replace(spec, tasks=tasks)


def with_cron(spec: PublishFile, trigger_id: str, cron: str) -> PublishFile:
    triggers = [
        msgspec.structs.replace(t, cron=cron) if t.id == trigger_id else t for t in spec.triggers
    ]
    return msgspec.structs.replace(spec, triggers=triggers)


# --- idempotence and revisions ---------------------------------------------------------------


async def test_publishing_the_same_file_twice_changes_nothing(env: Env) -> None:
    """Publishing the same PublishFile again reports everything 'unchanged' and rewrites no
    row: no revision, state_version or claim_version moves, and a live claim and an
    initialised cursor survive it."""
    spec = two_tasks()
    first = await env.publish(spec)
    assert set(first.triggers.values()) == {"added"}
    await env.make_due(ids=["a1"])
    [claim] = await env.store.claim("r1", 1, LEASE_MS)
    before = await snapshot(env)

    second = await env.publish(spec)

    assert second.projects == {"p": "unchanged"}
    assert second.tasks == {"p/a": "unchanged", "p/b": "unchanged"}
    assert second.triggers == {"p/a1": "unchanged", "p/a2": "unchanged", "p/b1": "unchanged"}
    assert await snapshot(env) == before
    assert (await env.schedule("p", claim.trigger_id))["claim_token"] == claim.fence.token


async def test_changed_cron_is_a_new_trigger_revision(env: Env) -> None:
    """A changed cron publishes a new revision of that trigger only: revision + 1 on the
    trigger and its schedule row, cursor NULL, claim cleared, state_version + 1 and
    claim_version + 1 (so the old claim's fence fails forever); counters and the last
    scheduled time are kept; the other triggers are not rewritten."""
    spec = two_tasks()
    await env.publish(spec)
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    assert [c.trigger_id for c in claims] == ["a1", "a2", "b1"]
    before = await env.schedules()
    [trig_before] = await env.su("SELECT * FROM qlsched.triggers WHERE trigger_id = 'a2'")

    result = await env.publish(with_cron(spec, "a2", "*/10 * * * *"))

    assert result.triggers == {"p/a1": "unchanged", "p/a2": "changed", "p/b1": "unchanged"}
    assert result.tasks == {"p/a": "unchanged", "p/b": "unchanged"}
    after = await env.schedules()
    old, new = before["a2"], after["a2"]
    assert new["trigger_revision"] == old["trigger_revision"] + 1 == 2
    assert new["next_fire_at_ms"] is None
    assert (new["claim_owner"], new["claim_token"], new["claim_expires_at_ms"]) == (
        None,
        None,
        None,
    )
    assert new["state_version"] == old["state_version"] + 1
    assert new["claim_version"] == old["claim_version"] + 1
    assert new["active"] is True
    for kept in ("last_scheduled_at_ms", "skipped_total", "coalesced_total"):
        assert new[kept] == old[kept]
    [trig] = await env.su("SELECT * FROM qlsched.triggers WHERE trigger_id = 'a2'")
    assert (trig["revision"], trig["cron"]) == (2, "*/10 * * * *")
    assert trig["content_digest"] != trig_before["content_digest"]
    assert trig["execution_revision_id"] == trig_before["execution_revision_id"]
    assert after["a1"] == before["a1"]
    assert after["b1"] == before["b1"]


async def test_one_publish_adds_and_changes_triggers_together(env: Env) -> None:
    """A file that adds a trigger and changes another writes both in one publish: the new
    one at revision 1 with a fresh schedule row, the changed one at revision 2 with its
    schedule reset, and neither written as the other."""
    spec = two_tasks()
    await env.publish(spec)
    before = await env.schedules()
    changed = with_cron(spec, "a2", "*/10 * * * *")
    grown = msgspec.structs.replace(
        changed, triggers=[*changed.triggers, trigger("p", "a3", task="a", enabled=False)]
    )

    result = await env.publish(grown)

    assert result.triggers == {
        "p/a1": "unchanged",
        "p/a2": "changed",
        "p/b1": "unchanged",
        "p/a3": "added",
    }
    rows = await env.su("SELECT * FROM qlsched.triggers ORDER BY trigger_id")
    stored = {r["trigger_id"]: (r["revision"], r["cron"], r["enabled"]) for r in rows}
    assert stored == {
        "a1": (1, "* * * * *", True),
        "a2": (2, "*/10 * * * *", True),
        "a3": (1, "* * * * *", False),
        "b1": (1, "0 3 * * *", True),
    }
    after = await env.schedules()
    assert after["a2"]["trigger_revision"] == 2
    assert after["a2"]["state_version"] == before["a2"]["state_version"] + 1
    assert (after["a3"]["trigger_revision"], after["a3"]["active"]) == (1, False)
    assert (after["a3"]["state_version"], after["a3"]["claim_version"]) == (
        before["a1"]["state_version"],
        before["a1"]["claim_version"],
    )
    assert after["a1"] == before["a1"]


async def test_changed_command_re_revisions_task_execution_and_its_triggers(env: Env) -> None:
    """A changed task command is a new task revision with a new pinned remote_worker
    execution revision (payload = the new command, digest = SHA-256 of the payload; the old
    revision is kept), and every trigger of that task becomes a new revision pinned to it
    (schedule reset); triggers of other tasks are not touched."""
    spec = two_tasks()
    await env.publish(spec)
    [old_exec] = await env.su(
        "SELECT * FROM qlsched.execution_revisions WHERE task_id = 'a' AND task_revision = 1"
    )
    before = await env.schedules()

    result = await env.publish(with_command(spec, "a", "echo a --changed"))

    assert result.tasks == {"p/a": "changed", "p/b": "unchanged"}
    assert result.triggers == {"p/a1": "changed", "p/a2": "changed", "p/b1": "unchanged"}
    [task] = await env.su("SELECT * FROM qlsched.tasks WHERE task_id = 'a'")
    assert (task["revision"], task["command"]) == (2, "echo a --changed")
    execs = await env.su(
        "SELECT * FROM qlsched.execution_revisions WHERE task_id = 'a' ORDER BY task_revision"
    )
    assert [e["task_revision"] for e in execs] == [1, 2]
    assert execs[0] == old_exec
    new_exec = execs[1]
    assert new_exec["executor_kind"] == "remote_worker"
    assert json.loads(new_exec["payload"])["command"] == "echo a --changed"
    assert new_exec["digest"] == hashlib.sha256(new_exec["payload"].encode()).hexdigest()
    assert new_exec["digest"] == task["content_digest"]
    rows = await env.su("SELECT * FROM qlsched.triggers ORDER BY trigger_id")
    pins = {r["trigger_id"]: (r["revision"], r["task_revision"]) for r in rows}
    assert pins == {"a1": (2, 2), "a2": (2, 2), "b1": (1, 1)}
    exec_ids = {r["trigger_id"]: r["execution_revision_id"] for r in rows}
    assert exec_ids["a1"] == exec_ids["a2"] == new_exec["execution_revision_id"]
    after = await env.schedules()
    for name in ("a1", "a2"):
        assert after[name]["trigger_revision"] == 2
        assert after[name]["state_version"] == before[name]["state_version"] + 1
        assert after[name]["claim_version"] == before[name]["claim_version"] + 1
    assert after["b1"] == before["b1"]


async def test_prune_disables_and_never_deletes(env: Env) -> None:
    """A trigger missing from the file is left alone without ``prune``; with it, it is
    disabled as a new revision (schedule inactive, claim cleared) and never deleted: its row,
    its schedule row and its Runs stay, it is no longer claimed, and pruning again changes
    nothing."""
    spec = one_project(ids=["keep", "gone"])
    await env.publish(spec)
    await env.make_due()
    claims = await env.store.claim("r1", 10, LEASE_MS)
    [gone_claim] = [c for c in claims if c.trigger_id == "gone"]
    [admitted] = await env.store.admit([fire_for(gone_claim)])
    assert isinstance(admitted, Admitted)
    await env.make_due(ids=["gone"])
    await env.store.claim("r1", 10, LEASE_MS)  # a live claim on "gone"
    smaller = msgspec.structs.replace(spec, triggers=[trigger("p", "keep")])
    before = await snapshot(env)

    unpruned = await env.publish(smaller)

    assert unpruned.triggers == {"p/keep": "unchanged"}
    assert await snapshot(env) == before

    pruned = await env.publish(smaller, prune=True)

    assert pruned.triggers == {"p/keep": "unchanged", "p/gone": "disabled"}
    [gone] = await env.su("SELECT * FROM qlsched.triggers WHERE trigger_id = 'gone'")
    assert (gone["enabled"], gone["revision"]) == (False, 2)
    row = await env.schedule("p", "gone")
    assert (row["active"], row["trigger_revision"], row["claim_token"]) == (False, 2, None)
    assert await env.su_val("SELECT count(*) FROM qlsched.triggers") == 2
    assert await env.runs_by_trigger() == {"gone": 1}
    await env.make_due(ids=["gone"])
    assert await env.store.claim("r2", 10, LEASE_MS) == []
    again_before = await snapshot(env)
    again = await env.publish(smaller, prune=True)
    assert again.triggers == {"p/keep": "unchanged"}
    assert await snapshot(env) == again_before


async def test_archiving_a_project_stops_claims_without_new_revisions(env: Env) -> None:
    """Archiving a project is a project revision, not a trigger revision: its schedule rows
    become inactive (never claimed) with cursor, claim versions and trigger revisions kept;
    un-archiving makes them claimable again, due where they were."""
    await env.publish(one_project(ids=["a", "b"]))
    cursor = await env.make_due()
    before = await env.schedules()

    archived = await env.publish(one_project(ids=["a", "b"], archived=True))

    assert archived.projects == {"p": "changed"}
    assert archived.triggers == {"p/a": "unchanged", "p/b": "unchanged"}
    [project] = await env.su("SELECT state, revision FROM qlsched.projects")
    assert (project["state"], project["revision"]) == ("archived", 2)
    rows = await env.schedules()
    for name in ("a", "b"):
        assert rows[name]["active"] is False
        for kept in ("trigger_revision", "next_fire_at_ms", "state_version", "claim_version"):
            assert rows[name][kept] == before[name][kept]
    assert await env.store.claim("r1", 10, LEASE_MS) == []

    await env.publish(one_project(ids=["a", "b"]))

    claims = await env.store.claim("r1", 10, LEASE_MS)
    assert [(c.trigger_id, c.cursor_ms) for c in claims] == [("a", cursor), ("b", cursor)]


# --- hostile input ---------------------------------------------------------------------------


def toml_str(text: str) -> str:
    """A TOML basic string for ``text`` (JSON's escapes are TOML's; DEL must be escaped)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_file(
    project: str = "p", task: str = "task", trig: str = "t", command: str = "true"
) -> bytes:
    return (
        f"[[projects]]\nid = {toml_str(project)}\n\n"
        f"[[tasks]]\nproject = {toml_str(project)}\nid = {toml_str(task)}\n"
        f"command = {toml_str(command)}\n\n"
        f"[[triggers]]\nproject = {toml_str(project)}\nid = {toml_str(trig)}\n"
        f'task = {toml_str(task)}\ncron = "* * * * *"\n'
    ).encode()


HOSTILE_IDS = [
    "p'; DROP TABLE qlsched.runs; --",
    'p"q',
    "p;q",
    "p\x00q",
    "p\nq",
    "Proj",
    "projé",
    "p q",
    "",
    "-p",
    "p" * 64,
    "p\u202eq",
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS, ids=repr)
@pytest.mark.parametrize(
    ("entry", "label"),
    [("project", "projects[0]"), ("task", "tasks[0]"), ("trig", "triggers[0]")],
)
def test_hostile_ids_are_rejected_naming_entry_and_field(
    entry: str, label: str, hostile: str
) -> None:
    """An id outside ``[a-z0-9][a-z0-9_.-]{0,62}`` (quotes, ``;``, ``--``, NUL, newline,
    upper case, non-ASCII, too long, bidi override) is rejected by decode_publish_file with
    a SpecError naming the entry and the field; nothing reaches the database."""
    raw = toml_file(**{entry: hostile})

    with pytest.raises(SpecError) as caught:
        decode_publish_file(raw)

    message = str(caught.value)
    assert message.startswith(label), message
    assert ": id: " in message, message


EDGE_IDS = ["p--q", "a.b_c-d", "0", "x" * 63, "9.-_"]


async def test_valid_but_odd_ids_are_stored_verbatim_end_to_end(env: Env) -> None:
    """Ids the rule allows however odd they look (``--``, dots, a lone digit, the 63-char
    maximum) are published, claimed and admitted verbatim, and the idempotency key embeds
    the trigger id unchanged (no ``:`` can occur in an id, so keys stay unambiguous)."""
    for n, odd in enumerate(EDGE_IDS):
        spec = decode_publish_file(toml_file(project=f"p{n}", task=odd, trig=odd))
        await env.publish(spec)
        await env.make_due(f"p{n}")

    claims = await env.store.claim("r1", 20, LEASE_MS)
    outcomes = await env.store.admit([fire_for(c) for c in claims])

    assert sorted(c.trigger_id for c in claims) == sorted(EDGE_IDS)
    assert all(isinstance(o, Admitted) for o in outcomes), outcomes
    rows = await env.su("SELECT trigger_id, task_id, idempotency_key FROM qlsched.runs")
    assert sorted(r["trigger_id"] for r in rows) == sorted(EDGE_IDS)
    for r in rows:
        assert r["task_id"] == r["trigger_id"]
        assert r["idempotency_key"].split(":")[3] == r["trigger_id"]


@pytest.mark.parametrize("hostile", ["p\x00q", "p\x1b[2Jq", "p\nq"], ids=repr)
def test_rejection_message_has_no_control_characters(hostile: str) -> None:
    """A rejected id is named in the error without raw control characters, so a hostile file
    cannot write escape sequences or fake lines to the operator's terminal or logs."""
    with pytest.raises(SpecError) as caught:
        decode_publish_file(toml_file(project=hostile))

    assert all(ch.isprintable() for ch in str(caught.value)), repr(str(caught.value))
    assert str(caught.value).startswith("projects[0] (id "), str(caught.value)


def shared_trigger_id(projects: tuple[str, ...]) -> PublishFile:
    """One task per project and, in each, a trigger with the same id ``nightly``."""
    return PublishFile(
        projects=[ProjectEntry(id=p) for p in projects],
        tasks=[TaskEntry(project=p, id="job", command=f"echo {p}") for p in projects],
        triggers=[trigger(p, "nightly", task="job") for p in projects],
    )


def test_a_trigger_id_in_two_projects_of_one_file_is_rejected() -> None:
    """The idempotency key names the trigger and not its project, so two projects sharing a
    trigger id would collide on ``runs.idempotency_key`` and one occurrence would be lost:
    the file is rejected, naming the second entry and the first project."""
    raw = "".join(
        f'[[projects]]\nid = "{p}"\n[[tasks]]\nproject = "{p}"\nid = "job"\ncommand = "true"\n'
        f'[[triggers]]\nproject = "{p}"\nid = "nightly"\ntask = "job"\ncron = "0 3 * * *"\n'
        for p in ("a", "b")
    )
    with pytest.raises(SpecError) as caught:
        decode_publish_file(raw.encode())

    message = str(caught.value)
    assert message.startswith('triggers[1] (id "nightly"): id: already a trigger of project a')
    assert "unique across projects" in message


async def test_a_trigger_id_taken_by_another_project_publishes_nothing(env: Env) -> None:
    """A file whose trigger id is already a trigger of another project (published earlier)
    is refused with a SpecError naming both, and nothing of it is written; the database's
    UNIQUE (trigger_id) is the last guard behind that check."""
    await env.publish(shared_trigger_id(("a",)))
    before = await snapshot(env)

    with pytest.raises(SpecError, match=r"trigger b/nightly: id: already a trigger of project a"):
        await env.publish(shared_trigger_id(("b",)))

    assert await snapshot(env) == before
    unique = await env.su(
        "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint"
        " WHERE conname = 'triggers_trigger_id_key'"
    )
    assert [r["def"] for r in unique] == ["UNIQUE (trigger_id)"]


HOSTILE_COMMANDS = {
    "quotes": """echo "it's" 'a "test"'""",
    "sql": "'); DROP TABLE qlsched.runs; -- \"; DELETE FROM qlsched.tasks; --",
    "shell": "true; rm -rf / --no-preserve-root && echo `id` $(id) | sh",
    "comment": "-- nothing here\n/* not a comment */ echo done",
    "unicode": "echo 'héllo wörld ✓ 日本語 😀 \u2028 \u202e e\u0301' \t tab",
    "control": "echo \x01\x07\x1b[31mred\x1b[0m\r\n\x7f",
    "json": '{"command": "evil", "executor": "local_shell"}',
    "max_bytes": "x" * (COMMAND_MAX_BYTES - 4) + "日b",
}


async def test_hostile_commands_are_stored_verbatim_and_never_run(env: Env, tmp_path: Path) -> None:
    """Commands with quotes, ``;``, ``--``, shell and SQL syntax, control characters,
    unicode (astral, bidi, combining) and a full 1 MB command go through the publish file
    and are stored byte for byte: the task's command and the execution payload's command
    equal the input, PostgreSQL's SHA-256 of the payload matches Python's (the admit
    verifies it and admits), and nothing is executed (marker files stay absent, every table
    is still there)."""
    marker = tmp_path / "executed"
    commands = {
        **HOSTILE_COMMANDS,
        "touch": f"touch {marker}; `touch {marker}`; $(touch {marker})",
    }
    assert len(commands["max_bytes"].encode()) == COMMAND_MAX_BYTES
    for name, command in commands.items():
        project = name.replace("_", "-")
        spec = decode_publish_file(toml_file(project=project, trig=project, command=command))
        await env.publish(spec)

    rows = await env.su(
        "SELECT k.project_id, k.command, e.payload FROM qlsched.tasks AS k"
        " JOIN qlsched.execution_revisions AS e USING (project_id, task_id)"
    )
    stored = {r["project_id"]: r for r in rows}
    for name, command in commands.items():
        row = stored[name.replace("_", "-")]
        assert row["command"] == command, name
        assert json.loads(row["payload"])["command"] == command, name
        assert json.loads(row["payload"])["executor"] == "remote_worker", name
    for name in commands:
        await env.make_due(name.replace("_", "-"))
    claims = await env.store.claim("r1", 20, LEASE_MS)
    assert len(claims) == len(commands)
    outcomes = await env.store.admit([fire_for(c) for c in claims])
    assert all(isinstance(o, Admitted) for o in outcomes), outcomes
    assert not marker.exists()
    assert await env.su_val("SELECT count(*) FROM qlsched.runs") == len(commands)
    assert await env.su_val("SELECT count(*) FROM qlsched.tasks") == len(commands)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo a\x00b", 'tasks[0] (id "task"): command: contains a NUL character'),
        ("", 'tasks[0] (id "task"): command: must not be empty'),
        (" \t\n", 'tasks[0] (id "task"): command: must not be empty'),
        (
            "x" * (COMMAND_MAX_BYTES + 1),
            f'tasks[0] (id "task"): command: longer than {COMMAND_MAX_BYTES} bytes',
        ),
        (
            "日" * (COMMAND_MAX_BYTES // 3 + 1),  # fewer characters than the limit, more bytes
            f'tasks[0] (id "task"): command: longer than {COMMAND_MAX_BYTES} bytes',
        ),
    ],
    ids=["nul", "empty", "blank", "over-1MB", "over-1MB-in-bytes"],
)
def test_unstorable_commands_are_rejected_naming_entry_and_field(
    command: str, expected: str
) -> None:
    """A command PostgreSQL text cannot hold (NUL), an empty one, or one over 1 MB of UTF-8
    is rejected with a SpecError naming the entry and the field."""
    with pytest.raises(SpecError) as caught:
        decode_publish_file(toml_file(command=command))

    assert str(caught.value) == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cron", "* * * * *; DROP TABLE qlsched.runs"),
        ("cron", "0 0 30 2 *"),
        ("timezone", "../../../etc/passwd"),
        ("timezone", "UTC'; --"),
    ],
)
def test_hostile_cron_and_timezone_are_rejected(field: str, value: str) -> None:
    """A cron expression or time zone that is not one (SQL or path tricks included) is
    rejected with a SpecError naming the trigger entry and the field."""
    raw = toml_file().replace(
        b'cron = "* * * * *"\n',
        b'cron = "* * * * *"\n' if field == "timezone" else b"",
    )
    raw += f"{field} = {toml_str(value)}\n".encode()

    with pytest.raises(SpecError) as caught:
        decode_publish_file(raw)

    assert str(caught.value).startswith(f'triggers[0] (id "t"): {field}: '), str(caught.value)


async def test_a_task_change_repins_every_trigger_of_the_task(env: Env) -> None:
    """Rule (issue #14, hole 2): a publish that changes a task re-pins every trigger of that
    task in the same transaction, including triggers its file does not list (reported
    ``repinned``), so none is left pinned to the old task revision and refused at every
    admit forever. Triggers of other tasks are untouched; both triggers keep firing."""
    first = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[
            TaskEntry(project="p", id="t", command="v1"),
            TaskEntry(project="p", id="other", command="same"),
        ],
        triggers=[
            trigger("p", "x", task="t"),
            trigger("p", "y", task="t"),
            trigger("p", "z", task="other"),
        ],
    )
    await env.publish(first)
    before = await env.schedules()
    second = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="t", command="v2")],
        triggers=[trigger("p", "x", task="t")],
    )

    result = await env.publish(second)

    assert result.tasks == {"p/t": "changed"}
    assert result.triggers == {"p/x": "changed", "p/y": "repinned"}
    pins = {
        r["trigger_id"]: (r["revision"], r["task_revision"])
        for r in await env.su("SELECT trigger_id, revision, task_revision FROM qlsched.triggers")
    }
    assert pins == {"x": (2, 2), "y": (2, 2), "z": (1, 1)}
    after = await env.schedules()
    assert after["z"] == before["z"]
    await env.make_due()
    outcomes = (await run_round(env.store, "r1", 16, LEASE_MS)).outcomes
    assert sorted(o.trigger_id for o in outcomes if isinstance(o, Admitted)) == ["x", "y", "z"]
    assert (await env.publish(second)).triggers == {"p/x": "unchanged"}


async def test_a_pruned_trigger_of_a_changed_task_is_disabled_once_and_pinned(env: Env) -> None:
    """With ``--prune`` and a changed task, a trigger of that task missing from the file is
    reported ``disabled`` (not ``repinned``), written once: one new revision, disabled,
    inactive, pinned to the new task revision."""
    first = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="t", command="v1")],
        triggers=[trigger("p", "x", task="t"), trigger("p", "y", task="t")],
    )
    await env.publish(first)
    second = PublishFile(
        projects=[ProjectEntry(id="p")],
        tasks=[TaskEntry(project="p", id="t", command="v2")],
        triggers=[trigger("p", "x", task="t")],
    )

    result = await env.publish(second, prune=True)

    assert result.triggers == {"p/x": "changed", "p/y": "disabled"}
    [y] = await env.su("SELECT * FROM qlsched.triggers WHERE trigger_id = 'y'")
    assert (y["revision"], y["task_revision"], y["enabled"]) == (2, 2, False)
    schedule = (await env.schedules())["y"]
    assert (schedule["trigger_revision"], schedule["active"]) == (2, False)
    assert (await env.publish(second, prune=True)).triggers == {"p/x": "unchanged"}
