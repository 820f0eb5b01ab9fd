"""The interleaving engine: run sessions' steps in one given order, isolation-tester style.

A session is one actor (a replica, a publisher, a VACUUM) with its own server connections
(its ``pids``). A step starts work on its session and ends when that work is done or
waits on a lock: the server says which (``pg_blocking_pids``), never a sleep. Before the
next step starts, every session still working must also be done or waiting, so a step
that a commit just unblocked finishes before anything else happens (the order is the
only thing that varies).

A step due on a session still waiting on a lock cannot run yet (isolation tester calls
such an order invalid): the engine runs the earliest later step of another session first
and records the order actually run (``Trace.effective``). A step with ``resumes`` set is
the exception: it is what lets its own session go on (opening the claim's gate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import asyncpg
import trio
import trio_asyncio

QUIESCE_TIMEOUT_S = 20.0
"""A step neither done nor waiting on a lock for this long is a hang (a finding)."""
POLL_S = 0.002
"""Between two polls of the server (each poll asks it; nothing is inferred from time)."""

BLOCKED_SQL = (
    "SELECT p, pg_catalog.pg_blocking_pids(p) AS by FROM pg_catalog.unnest($1::int[]) AS p"
)


@dataclasses.dataclass
class Step:
    """One step: ``run`` becomes the session's current work."""

    session: str
    name: str
    run: Callable[[], Awaitable[Any]]
    resumes: bool = False
    """Runs while its session waits at the claim gate (and opens it)."""

    @property
    def label(self) -> str:
        return f"{self.session}.{self.name}"


@dataclasses.dataclass
class Session:
    name: str
    pids: Callable[[], Sequence[int]]
    """The session's backends (read when polling: a lost connection is replaced)."""
    running: trio.Event | None = None
    """Set when the session's current work has ended (None: no work yet)."""


@dataclasses.dataclass
class Trace:
    planned: list[str]
    effective: list[str] = dataclasses.field(default_factory=list)
    errors: dict[str, BaseException] = dataclasses.field(default_factory=dict)
    """Step label -> the exception its work raised."""
    waited: list[str] = dataclasses.field(default_factory=list)
    """Steps that waited on a lock when they ended."""


def orderings(sizes: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every interleaving of programs of these sizes (each keeps its own order), as the
    program index of each step in turn."""
    total = sum(sizes)

    def rec(prefix: list[int], left: list[int]) -> Iterator[tuple[int, ...]]:
        if len(prefix) == total:
            yield tuple(prefix)
            return
        for i, n in enumerate(left):
            if n:
                left[i] -= 1
                prefix.append(i)
                yield from rec(prefix, left)
                prefix.pop()
                left[i] += 1

    yield from rec([], list(sizes))


def count_orderings(sizes: Sequence[int]) -> int:
    """The multinomial coefficient: how many interleavings ``orderings`` yields."""
    out, n = 1, 0
    for k in sizes:
        for i in range(1, k + 1):
            n += 1
            out = out * n // i
    return out


class Engine:
    """Runs one ordering; ``watch`` is a superuser connection used only to poll the server."""

    def __init__(self, watch: asyncpg.Connection[Any], loop: Any, gate_pid: int) -> None:
        self._watch = watch
        self._loop = loop
        self._gate_pid = gate_pid

    async def _blocked(self, sessions: Sequence[Session]) -> dict[str, set[int]]:
        pids = {p: s.name for s in sessions for p in s.pids()}
        rows = await trio_asyncio.aio_as_trio(self._watch.fetch, loop=self._loop)(
            BLOCKED_SQL, list(pids)
        )
        out: dict[str, set[int]] = {}
        for r in rows:
            if r["by"]:
                out.setdefault(pids[r["p"]], set()).update(r["by"])
        return out

    async def _quiesce(self, sessions: Sequence[Session]) -> dict[str, set[int]]:
        """Wait until every session's work is done or waits on a lock; returns the waits."""
        with trio.fail_after(QUIESCE_TIMEOUT_S):
            while True:
                busy = [s for s in sessions if s.running is not None and not s.running.is_set()]
                if not busy:
                    return {}
                blocked = await self._blocked(busy)
                if all(s.name in blocked for s in busy):
                    return blocked
                await trio.sleep(POLL_S)

    async def _wait_free(
        self, waiting: Sequence[trio.Event], trace: Trace, blocked: dict[str, set[int]]
    ) -> None:
        """Wait for the first of ``waiting`` (work that waits on a lock) to end."""
        with trio.move_on_after(QUIESCE_TIMEOUT_S):
            async with trio.open_nursery() as nursery:

                async def first(event: trio.Event) -> None:
                    await event.wait()
                    nursery.cancel_scope.cancel()

                for event in waiting:
                    nursery.start_soon(first, event)
            return
        who = await trio_asyncio.aio_as_trio(self._watch.fetch, loop=self._loop)(
            "SELECT pid, usename, state, wait_event, left(query, 60) AS q"
            " FROM pg_catalog.pg_stat_activity WHERE datname = current_database()"
        )
        backends = [dict(r) for r in who]
        raise AssertionError(f"no step can run: {trace.effective} waiting {blocked}: {backends}")

    def _at_gate(self, blocked: dict[str, set[int]], session: Session) -> bool:
        return blocked.get(session.name) == {self._gate_pid}

    async def run(
        self, programs: Sequence[Sequence[Step]], sessions: Sequence[Session], order: Sequence[int]
    ) -> Trace:
        queues = [list(p) for p in programs]
        pending = [queues[i].pop(0) for i in order]
        by_name = {s.name: s for s in sessions}
        trace = Trace(planned=[s.label for s in pending])
        blocked: dict[str, set[int]] = {}
        async with trio.open_nursery() as nursery:
            while pending:
                pick = None
                for i, step in enumerate(pending):
                    session = by_name[step.session]
                    if any(p.session == step.session for p in pending[:i]):
                        continue  # an earlier step of this session comes first
                    free = session.running is None or session.running.is_set()
                    if free or (step.resumes and self._at_gate(blocked, session)):
                        pick = i
                        break
                if pick is None:
                    # Every due session waits on a lock: one must end by itself (a deadlock
                    # or lock timeout error); wait for that, or report a hang.
                    due = {by_name[p.session].running for p in pending}
                    await self._wait_free([e for e in due if e is not None], trace, blocked)
                    blocked = await self._quiesce(sessions)
                    continue
                step = pending.pop(pick)
                trace.effective.append(step.label)
                session = by_name[step.session]
                if step.resumes:
                    # Inline, so the gate is open before the next poll; the session's
                    # work stays the claim it let go on.
                    try:
                        await step.run()
                    except Exception as exc:
                        trace.errors[step.label] = exc
                else:
                    done = trio.Event()
                    session.running = done

                    async def work(step: Step = step, done: trio.Event = done) -> None:
                        try:
                            await step.run()
                        except Exception as exc:
                            trace.errors[step.label] = exc
                        finally:
                            done.set()

                    nursery.start_soon(work)
                blocked = await self._quiesce(sessions)
                if step.session in blocked and not self._at_gate(blocked, session):
                    trace.waited.append(step.label)
            # Every step has run; what still waits must be let through by what ran.
            blocked = await self._quiesce(sessions)
            if blocked:
                raise AssertionError(f"sessions still waiting at the end: {blocked}")
        return trace
