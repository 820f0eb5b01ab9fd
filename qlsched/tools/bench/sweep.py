"""``qlsched bench --sweep 1,2,4,8,16``: the burst drain and its ceiling at each replica count.

For each R, in one run on one server: the burst drain with R replica processes, then the
pgbench ceiling with R clients on the same rows (``ceiling``: the per-occurrence pair and
the batch of the replicas' own round). Then the counts again in the opposite order, the
drain only: each R is judged on the better of its two drains. Why: one 30,000-row drain
lasts about two seconds, and on a shared machine two drains of the same R differed by up to
15 %; with one pass, a step's place in the run (what the server did just before) read as a
cliff. Each R reports its drain rate (both passes), the ratio to its ceiling, duplicates,
lost occurrences, SSI retries per admit statement and the admits that ran out of retries.
The targets are ratios inside this run: the drain never falls when the replicas double (R
against R/2), the largest count reaches 0.9x the rate of 4 (or of the smallest count above
1), and retries stay below 1 % of admit statements at every R.
"""

from __future__ import annotations

import msgspec

from qlsched.tools.bench.ceiling import ceiling
from qlsched.tools.bench.drain import burst
from qlsched.tools.bench.results import CeilingResult, DrainResult, Target
from qlsched.tools.bench.results import ratio as drain_ratio
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench.targets import maybe, rate

SWEEP_MAX = 8
"""Replica counts one sweep may list."""


class SweepPoint(msgspec.Struct, frozen=True, kw_only=True):
    replicas: int
    drain: DrainResult
    """The better of the R's two drains (the one judged)."""
    ceiling: CeilingResult
    retries_exhausted: int
    """Admits that ran out of serialization retries (their rows were given back at once),
    both drains."""
    other: DrainResult | None = None
    """The R's other drain (the second pass; None in a one-pass report)."""

    @property
    def drains(self) -> list[DrainResult]:
        return [self.drain] if self.other is None else [self.drain, self.other]


class SweepReport(msgspec.Struct, frozen=True, kw_only=True):
    triggers: int
    points: list[SweepPoint]
    targets: dict[str, Target]
    exactly_once: bool


def parse_counts(text: str) -> list[int] | str:
    """``1,2,4`` as sorted distinct replica counts, or the reason it is not one."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        return f"--sweep {text!r}: a comma-separated list of replica counts, e.g. 1,2,4,8,16"
    if not counts or counts[0] < 1 or len(counts) > SWEEP_MAX:
        return f"--sweep {text!r}: 1 to {SWEEP_MAX} replica counts, each at least 1"
    return counts


async def sweep(session: BenchSession, counts: list[int], *, max_replicas: int) -> SweepReport:
    for r in counts:
        if r > max_replicas:
            raise ValueError(f"{r} replicas: at most {max_replicas}")
    base = session.options
    first: dict[int, tuple[DrainResult, CeilingResult]] = {}
    second: dict[int, DrainResult] = {}
    try:
        for r in counts:
            session.options = msgspec.structs.replace(base, replicas=r, pgbench_clients=(r,))
            session.note(f"sweep: {r} replica(s)")
            drain = await burst(session)
            first[r] = (drain, await ceiling(session, drain.occurrences_per_s))
        for r in reversed(counts):
            session.options = msgspec.structs.replace(base, replicas=r)
            session.note(f"sweep, second pass: {r} replica(s)")
            second[r] = await burst(session)
    finally:
        session.options = base
    points = [judged_point(r, *first[r], second[r]) for r in counts]
    return SweepReport(
        triggers=base.triggers,
        points=points,
        targets=sweep_targets(points),
        exactly_once=all(
            d.duplicates == 0 and d.lost == 0 and d.malformed == 0 for p in points for d in p.drains
        ),
    )


def judged_point(r: int, one: DrainResult, pair: CeilingResult, two: DrainResult) -> SweepPoint:
    """R's point: the faster of its two drains judged, the other kept beside it."""
    best, other = sorted((one, two), key=lambda d: d.occurrences_per_s or 0.0, reverse=True)
    return SweepPoint(
        replicas=r,
        drain=best,
        other=other,
        ceiling=pair,
        retries_exhausted=sum(d.diagnostics.get("retry_exhausted", 0) for d in (one, two)),
    )


def sweep_targets(points: list[SweepPoint]) -> dict[str, Target]:
    by_r = {p.replicas: p.drain.occurrences_per_s for p in points}
    out: dict[str, Target] = {}
    pairs = [(r, r // 2) for r in by_r if r % 2 == 0 and r // 2 in by_r]
    falls = [
        f"{r} {rate(by_r[r])} < {half} {rate(by_r[half])}"
        for r, half in pairs
        if (by_r[r] or 0) < (by_r[half] or 0)
    ]
    if pairs:
        out["no_cliff"] = Target(
            goal="doubling the replicas never lowers the drain (R against R/2)",
            measured="; ".join(falls) or ", ".join(f"{r}: {rate(by_r[r])}" for r in sorted(by_r)),
            met=not falls,
        )
    largest = max(by_r)
    ref = 4 if 4 in by_r and largest > 4 else None
    if ref is not None:
        base = by_r[ref]
        part = (by_r[largest] or 0) / base if base else None
        out["largest_vs_4"] = Target(
            goal=f"{largest} replicas drain >= 0.9x the rate of 4",
            measured=maybe(part, "{:.2f}x"),
            met=None if part is None else part >= 0.9,
        )
    ratios = {p.replicas: _retry_ratio(p.drains) for p in points}
    known = [v for v in ratios.values() if v is not None]
    out["sweep_ssi_retries"] = Target(
        goal="SSI retries < 1 % of admit statements at every replica count",
        measured=", ".join(f"{r}: {maybe(v, '{:.2%}')}" for r, v in ratios.items()),
        met=all(v < 0.01 for v in known) if known else None,
    )
    return out


def _retry_ratio(drains: list[DrainResult]) -> float | None:
    """SSI retries per admit statement over every drain of one R."""
    statements = sum(d.admit_statements for d in drains)
    return sum(d.ssi_retries for d in drains) / statements if statements else None


def render_sweep(report: SweepReport, machine: str) -> str:
    head = (
        f"{'replicas':>8} {'drain/s':>10} {'other/s':>10} {'ceiling/s':>10} {'÷ceiling':>8}"
        f" {'retries':>8} {'exhausted':>9} {'dup':>4} {'lost':>5}"
    )
    lines = [
        f"sweep: {report.triggers:,} triggers due at once, on {machine}"
        " (drain: the better of two passes)",
        head,
    ]
    for p in report.points:
        batch = p.ceiling.batch
        ceiling_rate = None if batch is None else batch.occurrences_per_s
        ratio = drain_ratio(p.drain.occurrences_per_s, ceiling_rate)
        other = None if p.other is None else p.other.occurrences_per_s
        dup = sum(d.duplicates for d in p.drains)
        lost = sum(d.lost for d in p.drains)
        lines.append(
            f"{p.replicas:>8} {rate(p.drain.occurrences_per_s):>10} {rate(other):>10}"
            f" {rate(ceiling_rate):>10} {maybe(ratio, '{:.2f}'):>8}"
            f" {maybe(_retry_ratio(p.drains), '{:.1%}'):>8} {p.retries_exhausted:>9}"
            f" {dup:>4} {lost:>5}"
        )
    lines.append("")
    for t in report.targets.values():
        verdict = {True: "met", False: "MISSED", None: "n/a"}[t.met]
        lines.append(f"  [{verdict:>6}] {t.goal}: {t.measured}")
    return "\n".join(lines)


def draw_sweep(report: SweepReport, directory: str) -> str:
    """A PNG of drain and ceiling against the replica count (needs the bench extra)."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    xs = [p.replicas for p in report.points]
    figure, axes = plt.subplots(figsize=(8, 5))
    axes.plot(xs, [p.drain.occurrences_per_s or 0 for p in report.points], "o-", label="drain")
    ceilings = [p.ceiling.batch.occurrences_per_s if p.ceiling.batch else 0 for p in report.points]
    axes.plot(xs, ceilings, "s--", label="batch ceiling (pgbench)")
    axes.set_xscale("log", base=2)
    axes.set_xticks(xs, [str(x) for x in xs])
    axes.set_xlabel("replicas")
    axes.set_ylabel("occurrences / s")
    axes.set_title(f"burst drain of {report.triggers:,} triggers by replica count")
    axes.legend()
    figure.tight_layout()
    path = out / "sweep.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)
