"""The crash and the end: SIGKILL one replica while it holds claims, SIGTERM the rest."""

from __future__ import annotations

import random
import signal

import trio

from qlsched.tools.demo.monitor import Held, Screen, Window, read
from qlsched.tools.demo.plan import SETTLE_S, STOP_SLACK_S, Plan
from qlsched.tools.demo.replicas import DemoFleet, DemoReplica
from qlsched.tools.demo.text import clock, plural, wrap
from qlsched.tools.fleet import stop_in_order, wait_exit
from qlsched.tools.verify import ScheduleState, read_schedule_states


async def kill_one(w: Window, at: float, give_up: float) -> None:
    """At ``at``, SIGKILL one replica, if possible while it holds claims.

    A replica holds its claims only for the few milliseconds of a round, so: poll the rows
    as fast as the database answers; when one shows a live claim, SIGSTOP its owner (frozen,
    it can neither admit nor release), read again, and if it still holds claims, SIGKILL it.
    Otherwise SIGCONT and keep looking, until ``give_up``, then kill one anyway. An admit
    the frozen replica had already sent may still commit in the server; the final report
    tells which claims were really left to expire.
    """
    await trio.sleep_until(at)
    by_name = {r.name: r for r in w.fleet.replicas}
    victim: DemoReplica | None = None
    held: list[ScheduleState] = []
    while victim is None:
        states = await read(w.db, read_schedule_states)
        holders = sorted({s.claim_owner for s in states if s.claimed and s.claim_owner})
        candidates = [by_name[n] for n in holders if n in by_name and by_name[n].alive()]
        late = trio.current_time() >= give_up
        if candidates:
            candidate = random.choice(candidates)
            held = await frozen_claims(w, candidate)
            if held or late:
                victim = candidate
        elif late:
            alive = w.fleet.alive()
            victim = alive[len(alive) // 2]
        if victim is None:
            await trio.sleep(0.001)
    victim.signal(signal.SIGKILL)  # a stopped process dies of SIGKILL too
    victim.killed_at_s = w.elapsed()
    w.victim = victim
    w.held = {(s.project_id, s.trigger_id): Held(s) for s in held}
    await wait_exit(victim, 10)
    victim.ended = "SIGKILL (the crash)"
    announce_kill(w, victim, held)


async def frozen_claims(w: Window, replica: DemoReplica) -> list[ScheduleState]:
    """SIGSTOP ``replica`` and return the live claims it holds, frozen; resume it (SIGCONT)
    unless it holds some, cancelled or not, so that no replica is ever left stopped."""
    replica.signal(signal.SIGSTOP)
    held: list[ScheduleState] = []
    try:
        # A statement it sent before freezing still runs in the server: let it finish.
        await trio.sleep(SETTLE_S)
        states = await read(w.db, read_schedule_states)
        held = [s for s in states if s.claimed and s.claim_owner == replica.name]
    finally:
        if not held:
            replica.signal(signal.SIGCONT)
    return held


def announce_kill(w: Window, victim: DemoReplica, held: list[ScheduleState]) -> None:
    t = victim.killed_at_s or 0.0
    if held:
        claims = ", ".join(
            f"{s.project_id}/{s.trigger_id} @ {clock(s.next_fire_at_ms or 0)}" for s in held
        )
        text = (
            f"!! {t:.1f} s: SIGKILL {victim.name} (pid {victim.pid}) while it held "
            f"{plural(len(held), 'claim')}: {claims}. Nobody may touch those rows until the "
            f"lease ({w.plan.lease_ms / 1000:g} s) expires; then a survivor claims them under "
            "a new fence."
        )
    else:
        text = (
            f"!! {t:.1f} s: SIGKILL {victim.name} (pid {victim.pid}); it held no claim at that "
            "instant, so the survivors simply carry on."
        )
    w.screen.note("\n".join(wrap(text, "", "   ")))


async def stop_survivors(fleet: DemoFleet, plan: Plan, screen: Screen) -> list[str]:
    """SIGTERM every survivor, wait for each up to its stop deadline plus slack, SIGKILL the
    ones still alive. Returns the problems (empty when all stopped in order, exit 0)."""
    survivors = fleet.alive()
    problems = await stop_in_order(survivors, plan.stop_timeout_ms / 1000 + STOP_SLACK_S)
    names = ", ".join(r.name for r in survivors)
    if problems:
        screen.note(f"stopping {names}: " + "; ".join(problems))
    else:
        screen.note(f"stopped {names} in order (SIGTERM: drain, release, exit 0)")
    return problems
