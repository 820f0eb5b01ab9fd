"""Config bounds and relations, one row each: the value just inside is accepted, just
outside is refused naming the option, the bound and the source."""

from __future__ import annotations

from typing import Any

import pytest

from qlsched.cli import build_parser
from qlsched.core.config import BOUNDS, FLAGS, Config, ConfigError, flag_of
from qlsched.settings import given_flags, load_config

BASE = {"owner": "r1", "lease_ms": 3_600_000, "stop_timeout_ms": 0, "cadence_ms": 10}
"""A config where every relation holds whichever single bound a case moves."""


def error_of(values: dict[str, Any]) -> str | None:
    try:
        Config(**values)
    except ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_each_bound_is_inclusive_and_named(name: str) -> None:
    """Rule: low and high pass the bound check (a relation with another option may still
    refuse them); one past either is ConfigError naming the option, bound and source."""
    low, high = BOUNDS[name]
    for ok in (low, high):
        error = error_of({**BASE, name: ok})
        assert error is None or "out of bounds" not in error, error
    for bad in (low - 1, high + 1):
        assert error_of({**BASE, name: bad}) == (
            f"{name}={bad} is out of bounds {low}..{high} (from default)"
        )


def test_relations_between_options() -> None:
    """Rule: the lease must outlast the stop deadline and the cadence."""
    with pytest.raises(ConfigError, match="lease_ms=10000 must be greater than stop_timeout_ms"):
        Config(owner="r1", lease_ms=10_000, stop_timeout_ms=10_000)
    with pytest.raises(ConfigError, match="lease_ms"):
        Config(owner="r1", lease_ms=2_000, stop_timeout_ms=0, cadence_ms=2_000)


def test_catch_up_budget_is_at_least_the_claim_budget() -> None:
    """Rule: a round grows while catching up, never below where it starts: a catch-up budget
    under the claim budget is refused, naming both options and where each came from; equal
    turns growth off; the default grows to the hard cap."""
    with pytest.raises(ConfigError, match="catch_up_budget=8 must be at least claim_budget=16"):
        Config(owner="r1", catch_up_budget=8)
    with pytest.raises(ConfigError, match=r"\(from environment QLSCHED_CATCH_UP_BUDGET, flag"):
        load_config(env={"QLSCHED_CATCH_UP_BUDGET": "4"}, flags={"claim_budget": 8})
    assert Config(owner="r1", claim_budget=8, catch_up_budget=8).catch_up_budget == 8
    assert Config(owner="r1").catch_up_budget == 256


def test_sources_override_in_order_and_are_named() -> None:
    """Rule: flags override the environment, which overrides defaults; an error names the
    source it came from."""
    config = load_config(
        env={"QLSCHED_LEASE_MS": "40_000", "QLSCHED_CLAIM_BUDGET": "8"}, flags={"claim_budget": 4}
    )
    assert (config.lease_ms, config.claim_budget) == (40_000, 4)
    with pytest.raises(ConfigError, match=r"\(from environment QLSCHED_CADENCE_MS\)"):
        load_config(env={"QLSCHED_CADENCE_MS": "5"})


def test_lookahead_leaves_most_of_the_lease_for_the_admit() -> None:
    """Rule: rows are claimed at most a quarter of a lease ahead, 0 turns it off, and the
    error names both options."""
    assert Config(owner="r1").lookahead_ms == 250
    assert Config(owner="r1", lookahead_ms=0).lookahead_ms == 0
    assert Config(owner="r1", lease_ms=40_000, lookahead_ms=10_000).lookahead_ms == 10_000
    with pytest.raises(ConfigError, match="lookahead_ms=10001 must be at most a quarter"):
        Config(owner="r1", lease_ms=40_000, lookahead_ms=10_001)
    with pytest.raises(ConfigError, match=r"lookahead_ms=-1 is out of bounds 0\.\.60000"):
        Config(owner="r1", lookahead_ms=-1)


def test_every_run_flag_sets_the_config_field_it_is_named_after() -> None:
    """Rule: ``qlsched run`` has one flag per entry of ``core.config.FLAGS``, named after its
    Config field (``claim_budget`` is ``--claim-budget``), and the value given lands in that
    field: the option names have one source."""
    given = {
        "dsn": "postgresql://db.invalid/qlsched",
        "pg_bindir": "bin",
        "data_dir": "data",
        "owner": "o1",
        "claim_budget": "7",
        "catch_up_budget": "9",
        "lease_ms": "40000",
        "cadence_ms": "500",
        "lookahead_ms": "100",
        "stop_timeout_ms": "1000",
        "http": "127.0.0.1:9",
        "diagnostics": "d.log",
    }
    assert set(given) == set(FLAGS)
    argv = ["run", *(part for name, value in given.items() for part in (flag_of(name), value))]
    config = load_config(env={}, flags=given_flags(build_parser().parse_args(argv)))
    assert {name: str(getattr(config, name)) for name in FLAGS} == given
