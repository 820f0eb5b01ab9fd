"""The explorer's pairs: a replica's round (one of seven shapes) against one concurrent actor
(one of seven), each ordering on a project of its own in one shared database.

Every project ``oN`` has task ``t`` and two triggers (ids ``oNx``, ``oNy``: trigger ids are
unique across projects): ``x`` every minute (misfire ``skip``, grace
2 min) and ``y`` yearly (``fire_once``). The round's shape sets the cursors before it:

* ``init``: x uninitialised -> Initialize; ``fire``: x due -> one Fire, the single admit;
  ``batch``: x and y due -> two Fires, the batch admit; ``skip``: x ten minutes late ->
  Skip; ``release``: x due, the claim let go undecided; ``lost``: as ``fire``, but the
  admit's reply is lost after its COMMIT (a proxy resets the connection); ``ahead``: x
  runs every second and falls due just after the set-up; the round's replica claims
  it ahead (its lookahead), decides it as of its due time and admits it, the store sending
  it again until the database clock says it is due (the oracle: never admitted early).

A round is four steps, ``claim.snap`` (the claim statement has its snapshot and waits at
the gate, before locking a row), ``claim.lock`` (the gate opens: it locks and returns),
``decide`` (pure) and ``settle`` (admit / initialize / skip); ``release`` replaces the
last two. The concurrent actors: a publish (``write`` in an open transaction, then
``commit``) of a spec change of x, a task change in a file listing only y, a disable of
x, a prune (a file without x, ``--prune``), a project archive; a takeover (a second
replica: ``expire`` the claim's lease as superuser, ``claim``, ``decide``, ``settle``);
``VACUUM FULL`` of the schedule table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from qlsched.core.cron import next_after
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry, TriggerEntry
from qlsched.postgres.publish import publish
from tests.interleave.engine import Session, Step
from tests.interleave.oracle import History, Start, read_rows, record_revisions, schedule_of
from tests.interleave.world import GATE_KEY, Publisher, Raw, Replica

ROUNDS = ("init", "fire", "batch", "skip", "release", "lost", "ahead")
ACTORS = ("spec", "task", "disable", "prune", "archive", "takeover", "vacuum")

EVERY_MINUTE = "* * * * *"
EVERY_SECOND = "* * * * * *"
YEARLY = "0 0 1 1 *"
MINUTE_MS = 60_000
GRACE_MS = 120_000
AHEAD_MS = 100
"""``ahead``: x (every second) falls due at the first whole second this long after the
round's set-up."""
LOOKAHEAD_MS = 2_000
"""The round's replica claims this far ahead: ``ahead``'s row is claimed ahead in every
ordering where the claim comes first. A row a takeover moved to its next occurrence may
fall within it too: the round's settle then waits for that due time (at most this long,
well within a step's quiet time) instead of holding the Fire as a replica does."""

NOW_SQL = "SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint"
SET_CURSOR_SQL = (
    "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $3"
    " WHERE project_id = $1 AND trigger_id = $2"
)
EXPIRE_SQL = (
    "UPDATE qlsched.trigger_schedules SET claim_expires_at_ms ="
    " (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000)::bigint - 1"
    " WHERE project_id = $1 AND claim_token IS NOT NULL"
)
RETIRE_SQL = "UPDATE qlsched.trigger_schedules SET active = false WHERE project_id = $1"


def publish_file(
    project: str,
    *,
    x_cron: str = EVERY_MINUTE,
    x_enabled: bool = True,
    with_x: bool = True,
    command: str = "true",
    archived: bool = False,
) -> PublishFile:
    x = TriggerEntry(
        project=project,
        id=f"{project}x",
        task="t",
        cron=x_cron,
        misfire="skip",
        misfire_grace_ms=GRACE_MS,
        enabled=x_enabled,
    )
    y = TriggerEntry(
        project=project,
        id=f"{project}y",
        task="t",
        cron=YEARLY,
        misfire="fire_once",
        misfire_grace_ms=GRACE_MS,
    )
    return PublishFile(
        projects=[ProjectEntry(id=project, archived=archived)],
        tasks=[TaskEntry(project=project, id="t", command=command)],
        triggers=[x, y] if with_x else [y],
    )


def actor_publish(actor: str, project: str) -> tuple[PublishFile, bool]:
    """The file (and prune flag) of a publishing actor."""
    match actor:
        case "spec":
            return publish_file(project, x_cron=YEARLY), False
        case "task":
            return publish_file(project, with_x=False, command="false"), False
        case "disable":
            return publish_file(project, x_enabled=False), False
        case "prune":
            return publish_file(project, with_x=False), True
        case "archive":
            return publish_file(project, archived=True), False
    raise AssertionError(actor)


@dataclasses.dataclass
class Actors:
    """The sessions a pair needs (the replica ``a`` always; the rest by actor)."""

    su: Raw
    admin: Raw
    gate: Raw
    a: Replica
    publisher: Publisher | None = None
    c: Replica | None = None
    c_su: Raw | None = None
    vacuum: Raw | None = None


@dataclasses.dataclass
class Ordering:
    """One ordering's project, its history and its starting rows."""

    project: str
    history: History = dataclasses.field(default_factory=dict)
    starts: dict[str, Start] = dataclasses.field(default_factory=dict)


def _jan_first(now_ms: int) -> int:
    year = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).year
    return int(dt.datetime(year, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)


async def set_up(actors: Actors, shape: str, o: Ordering) -> None:
    """Publish the project, place the cursors for the round's shape, record the start."""
    su, p = actors.su, o.project
    spec = publish_file(p, x_cron=EVERY_SECOND) if shape == "ahead" else publish_file(p)
    await actors.admin.call(publish, actors.admin.conn, spec)
    now = int(await su.fetchval(NOW_SQL))
    minute = now - now % MINUTE_MS
    yearly_next = next_after(schedule_of(YEARLY, "UTC"), now)
    ahead = -(-(now + AHEAD_MS) // 1000) * 1000  # the first whole second AHEAD_MS away
    x = {"init": None, "skip": minute - 10 * MINUTE_MS, "ahead": ahead}.get(shape, minute)
    y = _jan_first(now) if shape == "batch" else yearly_next
    await su.execute(SET_CURSOR_SQL, p, f"{p}x", x)
    await su.execute(SET_CURSOR_SQL, p, f"{p}y", y)
    await su.call(record_revisions, su.conn, p, o.history)
    for row in await su.call(read_rows, su.conn, p):
        o.starts[row.trigger_id] = Start(row.revision, row.cursor_ms, row.skipped, row.coalesced)


def programs(
    actors: Actors, shape: str, names: Sequence[str], o: Ordering, *, fold_decide: bool = False
) -> tuple[list[list[Step]], list[Session]]:
    """The round's steps and each actor's, for one ordering on project ``o.project``.
    ``fold_decide`` makes decide part of settle (it is pure: where it runs changes nothing
    the database sees), for the larger three-session explorations."""
    a, gate = actors.a, actors.gate

    async def snap() -> None:
        await gate.execute("SELECT pg_catalog.pg_advisory_lock($1)", GATE_KEY)
        await a.claim()

    async def unlock() -> None:
        await gate.execute("SELECT pg_catalog.pg_advisory_unlock($1)", GATE_KEY)

    round_steps = [Step("A", "claim.snap", snap), Step("A", "claim.lock", unlock, resumes=True)]
    if shape == "release":
        round_steps.append(Step("A", "release", a.release))
    elif fold_decide:
        round_steps.append(Step("A", "decide+settle", lambda: _decide_settle(a)))
    else:
        round_steps += [Step("A", "decide", a.decide), Step("A", "settle", a.settle)]
    progs = [round_steps]
    sessions = [Session("A", lambda: a.pids)]
    for actor in names:
        steps, session = _actor_program(actors, actor, o, fold_decide)
        progs.append(steps)
        sessions.append(session)
    return progs, sessions


async def _decide_settle(r: Replica) -> None:
    await r.decide()
    await r.settle()


def _actor_program(
    actors: Actors, actor: str, o: Ordering, fold_decide: bool
) -> tuple[list[Step], Session]:
    if actor in ("spec", "task", "disable", "prune", "archive"):
        pub = actors.publisher
        assert pub is not None
        spec, prune = actor_publish(actor, o.project)

        async def write() -> None:
            await pub.write(spec, prune=prune)

        async def commit() -> None:
            await pub.commit(o.project, o.history)

        steps = [Step("B", f"{actor}.write", write), Step("B", f"{actor}.commit", commit)]
        return steps, Session("B", lambda: [pub.raw.pid])
    if actor == "takeover":
        c, c_su = actors.c, actors.c_su
        assert c is not None
        assert c_su is not None

        async def expire() -> None:
            await c_su.execute(EXPIRE_SQL, o.project)

        steps = [Step("C", "expire", expire), Step("C", "claim", c.claim)]
        if fold_decide:
            steps.append(Step("C", "decide+settle", lambda: _decide_settle(c)))
        else:
            steps += [Step("C", "decide", c.decide), Step("C", "settle", c.settle)]
        return steps, Session("C", lambda: [*c.pids, c_su.pid])
    if actor == "vacuum":
        v = actors.vacuum
        assert v is not None

        async def vacuum() -> None:
            await v.execute("VACUUM FULL qlsched.trigger_schedules")

        return [Step("V", "vacuum_full", vacuum)], Session("V", lambda: [v.pid])
    raise AssertionError(actor)


async def retire(actors: Actors, o: Ordering) -> None:
    """Take the ordering's rows out of every later claim; open the gate, end the publish."""
    await actors.gate.execute("SELECT pg_catalog.pg_advisory_unlock_all()")
    if actors.publisher is not None:
        await actors.publisher.abort()
    await actors.su.execute(RETIRE_SQL, o.project)
