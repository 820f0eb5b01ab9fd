"""The bench's costs that must not grow: the decision figure counts exactly, and each cost
target is judged on its own figure."""

from __future__ import annotations

import msgspec

from qlsched.tools.bench.costs import ROUND, YEAR_MS, decision_cost
from qlsched.tools.bench.results import CostResult, DecisionCost, ReadinessCost, RecoveryCost
from qlsched.tools.bench.targets import cost_targets

NOW_MS = 1_774_000_000_000
"""2026-03-20: the year before it holds both of Berlin's 2025 transitions."""


def costs() -> CostResult:
    return CostResult(
        decision=DecisionCost(
            cron="* * * * * *", timezone="Europe/Berlin", late_ms=YEAR_MS, calls=512,
            p50_us=50.0, p99_us=150.0, max_us=400.0, coalesced=31_536_000,
            expected_coalesced=31_536_000, exact=True, round_size=256, rounds=2,
            round_worst_ms=15.0,
        ),
        readiness=ReadinessCost(checks=3, p50_ms=40.0, max_ms=45.0, connect_p50_ms=5.0,
                                ready=True),
        recovery=RecoveryCost(terminal_attempts=100, live_attempts=100, load_s=1.0, calls=3,
                              first_ms=20.0, p50_ms=3.0, max_ms=20.0, marked=50),
    )  # fmt: skip


def test_a_decision_a_year_late_reports_every_second_passed_over() -> None:
    """An every-second fire_once trigger in Europe/Berlin a year late passes over exactly
    the seconds of that year (a wildcard hour follows real time through both DST
    transitions), and the decision figure says so; a round is ``ROUND`` timed calls."""
    cost = decision_cost(1, now_ms=NOW_MS)
    assert cost.coalesced == cost.expected_coalesced == 365 * 86_400
    assert cost.exact is True
    assert cost.calls == ROUND
    assert 0 < cost.p50_us <= cost.p99_us <= cost.max_us


def test_every_cost_target_is_met_by_figures_within_it() -> None:
    """Figures within their bounds meet all four targets."""
    judged = cost_targets(costs())
    assert {k: t.met for k, t in judged.items()} == {
        "decision_year_late": True,
        "decision_round": True,
        "recovery": True,
        "readiness": True,
    }


def test_each_cost_target_is_missed_by_its_own_figure() -> None:
    """An inexact count or a slow decision misses the decision target, a long round the
    round target, a slow or incomplete recovery the recovery target, a slow or not-ready
    readiness the readiness target: each only its own."""
    base = costs()
    d, rec, ready = base.decision, base.recovery, base.readiness
    cases = {
        "decision_year_late": [
            msgspec.structs.replace(base, decision=msgspec.structs.replace(d, exact=False)),
            msgspec.structs.replace(base, decision=msgspec.structs.replace(d, p99_us=1001.0)),
        ],
        "decision_round": [
            msgspec.structs.replace(base, decision=msgspec.structs.replace(d, round_worst_ms=50.5)),
        ],
        "recovery": [
            msgspec.structs.replace(base, recovery=msgspec.structs.replace(rec, max_ms=101.0)),
            msgspec.structs.replace(base, recovery=msgspec.structs.replace(rec, marked=49)),
        ],
        "readiness": [
            msgspec.structs.replace(base, readiness=msgspec.structs.replace(ready, max_ms=51.0)),
            msgspec.structs.replace(base, readiness=msgspec.structs.replace(ready, ready=False)),
        ],
    }
    for missed, variants in cases.items():
        for variant in variants:
            judged = cost_targets(variant)
            assert {k for k, t in judged.items() if not t.met} == {missed}, (missed, variant)


def test_publish_is_judged_at_the_goals_size_only() -> None:
    """100,000 triggers in <= 10 s and again unchanged in <= 2 s meet the publish targets,
    slower misses them, and a smaller (quick) file is shown but not judged."""
    from qlsched.tools.bench.results import PublishCost
    from qlsched.tools.bench.targets import publish_targets

    def cost(triggers: int, added_s: float, unchanged_s: float) -> PublishCost:
        return PublishCost(
            triggers=triggers, tasks=100, added_s=added_s, unchanged_s=unchanged_s,
            added=triggers, unchanged=triggers,
        )  # fmt: skip

    met = publish_targets(cost(100_000, 9.5, 1.9))
    assert (met["publish"].met, met["publish_unchanged"].met) == (True, True)
    slow = publish_targets(cost(100_000, 10.5, 2.1))
    assert (slow["publish"].met, slow["publish_unchanged"].met) == (False, False)
    quick = publish_targets(cost(2_000, 5.0, 5.0))
    assert (quick["publish"].met, quick["publish_unchanged"].met) == (None, None)
