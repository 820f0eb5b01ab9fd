"""The control actions' series in a replica's metrics (docs/contract.md §7): read from the
database at each scrape, absent until a first read, every kind shown from zero after it."""

from __future__ import annotations

from qlsched.cluster.metrics import Metrics
from qlsched.core.control import ActionTotal


def test_action_series_appear_after_a_read_with_every_kind_from_zero() -> None:
    """Rule: before any read there is no action series (no invented zero); after a read of
    an empty totals table, pause, resume and cancel show 0 and qlsched_paused_total 0; later reads
    replace the values (database-wide totals, not increments)."""
    metrics = Metrics()
    assert b"qlsched_schedule_actions" not in metrics.render()
    assert b"qlsched_paused_total" not in metrics.render()

    metrics.set_action_totals([])

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"profile": "cluster", **labels})

    assert value("qlsched_schedule_actions_total", kind="pause") == 0
    assert value("qlsched_schedule_actions_total", kind="resume") == 0
    assert value("qlsched_schedule_actions_total", kind="cancel") == 0
    assert value("qlsched_paused_total") == 0

    metrics.set_action_totals([ActionTotal("pause", 5, 0), ActionTotal("resume", 4, 1234)])
    assert value("qlsched_schedule_actions_total", kind="pause") == 5
    assert value("qlsched_schedule_actions_total", kind="resume") == 4
    assert value("qlsched_paused_total") == 1234
