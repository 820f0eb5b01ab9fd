"""What a newcomer reads at the end of the demo: what happened, per replica, per trigger."""

from __future__ import annotations

from qlsched.tools.demo.monitor import Window
from qlsched.tools.demo.text import clock, plural, wrap
from qlsched.tools.verify import VerifyReport

FENCE = (
    "A fence is what a replica's claim on a trigger carries (owner, random token, version, "
    "lease expiry): every write must still match it, so a replica that lost its claim can "
    "never write again."
)


def summary(
    w: Window, report: VerifyReport, stop_problems: list[str], source: str, triggers: int
) -> list[str]:
    """What a newcomer reads at the end: what happened, per replica, per trigger, verdict."""
    out = _what_happened(w, source, triggers) + _replicas(w) + _per_trigger(report)
    out += _verified(report, stop_problems)
    verdict = "exactly once held" if report.ok else "EXACTLY ONCE VIOLATED"
    taken = sum(1 for h in w.held.values() if h.fate.taken_over)
    out += [
        "",
        f"RESULT: {verdict}: {len(report.duplicates)} duplicates, {len(report.lost)} lost, "
        f"{report.runs} runs, {plural(taken, 'takeover')} after the crash.",
    ]
    return out


def _what_happened(w: Window, source: str, triggers: int) -> list[str]:
    plan, victim = w.plan, w.victim
    out = ["", "What happened"]
    out += wrap(
        f"{plan.replicas} replicas (separate processes) scheduled the {triggers} triggers of "
        f"{source} on one PostgreSQL for {plan.seconds} s."
    )
    out += wrap(FENCE)
    if victim is not None:
        held = f"while it held {plural(len(w.held), 'claim')}" if w.held else "between rounds"
        out += wrap(
            f"At {victim.killed_at_s or 0:.1f} s {victim.name} was killed with SIGKILL {held}: "
            "no goodbye, no release."
        )
        for (project_id, trigger_id), h in sorted(w.held.items()):
            out += wrap(f"{project_id}/{trigger_id}: {h.fate.text}", "    ", "  ")
    return out


def _replicas(w: Window) -> list[str]:
    out = ["", "Replicas (each a `python -m qlsched run` process)"]
    for r in w.fleet.replicas:
        ended = r.ended
        if r.killed_at_s is not None:
            ended = f"SIGKILL at {r.killed_at_s:.1f} s (the crash)"
        codes = r.diagnostic_codes()
        diag = ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())) or "none"
        out.append(
            f"  {r.name:<12} {w.runs.get(r.name, 0):>5} runs   {ended:<32} diagnostics: {diag}"
        )
    out += wrap(
        "They compete for every due row (FOR UPDATE SKIP LOCKED): whichever round comes first "
        "claims it, so the split is uneven by nature."
    )
    return out


def _per_trigger(report: VerifyReport) -> list[str]:
    out = ["", "Per trigger (the occurrences core computes from its first cursor to its current)"]
    out.append(
        f"  {'trigger':<22} {'cron':<14} {'misfire (grace)':<17} {'expected':>8} {'runs':>5} "
        f"{'coalesced':>9} {'skipped':>7} {'lost':>5}"
    )
    for t in report.triggers:
        name = f"{t.project_id}/{t.trigger_id}"
        policy = f"{t.misfire_policy} ({t.misfire_grace_ms / 1000:g} s)"
        out.append(
            f"  {name[:22]:<22} {t.cron[:14]:<14} {policy[:17]:<17} {t.occurrences:>8} "
            f"{t.runs:>5} {t.coalesced:>9} {t.skipped:>7} {t.lost:>5}"
        )
    return out


def _verified(report: VerifyReport, stop_problems: list[str]) -> list[str]:
    out = ["", "Verified from the database (observer role, one snapshot)"]
    out.append(f"  {len(report.duplicates)} duplicates   (occurrences with more than one Run)")
    out.append(f"  {len(report.lost)} lost         (occurrences with no Run and not counted)")
    out += wrap(
        f"{report.skipped} skipped by policy (counted), {report.coalesced} passed over by a "
        "late Fire (coalesced, counted)"
    )
    malformed = len(report.bad_runs) + len(report.bad_attempts) + len(report.bad_events)
    out += wrap(
        f"{report.runs} runs, {malformed} malformed: each has 1 pristine Attempt, the events "
        "run.created and run.queued, a queue time not before its occurrence, and the fence "
        "it was admitted under",
        hang="  ",
    )
    if report.unexpected:
        out.append(f"  {len(report.unexpected)} unexpected (Runs at no expected occurrence)")
    for label, items in (
        ("duplicate", report.duplicates),
        ("lost", report.lost),
        ("unexpected", report.unexpected),
    ):
        for o in items[:5]:
            out.append(f"    {label}: {o.project_id}/{o.trigger_id} @ {clock(o.scheduled_for_ms)}")
    for p in (report.bad_runs + report.bad_attempts + report.bad_events)[:5]:
        out.append(f"    run {p.run_id}: {p.problem}")
    for note in stop_problems:
        out += wrap(f"note: {note}")
    return out
