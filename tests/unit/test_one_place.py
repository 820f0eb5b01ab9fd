"""One place for each rule (issue #32): the lease arithmetic, a listen address and a
jitter are each checked or computed by one function that every caller uses, and no other
module of the product defines a lease margin or splits ``HOST:PORT`` by itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qlsched.core import lease
from qlsched.core.address import parse_host_port
from qlsched.core.config import Config, ConfigError
from qlsched.core.cron import parse_cron
from qlsched.core.jitter import JITTER_MS_MAX, jitter_problem

PACKAGE = Path(__file__).resolve().parents[2] / "qlsched"


RUNTIME = ("core", "postgres", "sqlite", "edge", "cluster", "admin")


def sources() -> dict[str, str]:
    """The runtime's modules (the demo and the bench schedule their own faults)."""
    return {
        str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8")
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] in RUNTIME
    }


def test_lease_margins_are_defined_in_one_module() -> None:
    """No module but ``core/lease.py`` defines a ``*_MARGIN_S`` or does arithmetic on a
    lease in seconds (``lease_ms / 1000``)."""
    found = [
        name
        for name, text in sources().items()
        if name != "core/lease.py"
        and (re.search(r"^[A-Z_]*MARGIN_S\b.*=", text, re.M) or "lease_ms / 1000" in text)
    ]
    assert found == []


def test_lease_arithmetic() -> None:
    """The budgets the cluster reckons from a 30 s lease and a 1 s cadence."""
    assert lease.retry_deadline_s(100.0, 30_000) == 129.5
    assert not lease.round_outlived_lease(29.0, 30_000)
    assert lease.round_outlived_lease(29.001, 30_000)
    assert lease.call_timeout_s(30_000, 1_000) == 28.0
    assert lease.call_timeout_s(2_000, 1_000) == 1.0  # never under half a lease
    assert lease.request_poll_interval_s(1_000, 30_000) == 5.0
    assert lease.request_poll_interval_s(1_000, 4_000) == 2.0  # at most half a lease
    assert lease.request_poll_interval_s(10_000, 12_000) == 10.0  # at least a cadence


def test_host_port_is_split_in_one_place() -> None:
    """Only ``core/address.py`` splits an address at its last colon."""
    found = [
        name
        for name, text in sources().items()
        if name != "core/address.py" and 'rpartition(":")' in text
    ]
    # cluster/http.py reads back the address hypercorn bound (its own output), not input.
    assert found == ["cluster/http.py"]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:65535", ("localhost", 65535)),
        ("localhost:65536", None),
        ("localhost", None),
        (":80", None),
        ("host:８０", None),
        ("host:-1", None),
    ],
)
def test_parse_host_port(text: str, parsed: tuple[str, int] | None) -> None:
    """HOST:PORT with a port 0..65535 in ASCII digits, brackets dropped; else None."""
    assert parse_host_port(text) == parsed


def test_config_and_edge_share_the_address_rule() -> None:
    """What the cluster's Config refuses, the Edge's ``--http`` refuses too, and the
    Config's parsed address is the parser's."""
    from qlsched.edge.settings import parse_address

    assert Config(owner="r", http="[::1]:9000").http_address() == ("::1", 9000)
    for bad in ("nonsense", "h:99999"):
        with pytest.raises(ConfigError):
            Config(owner="r", http=bad)
        with pytest.raises(ConfigError):
            parse_address(bad)


def test_jitter_problem() -> None:
    """A jitter is 0..one hour and below the shortest period; the phrase says which."""
    minutely = parse_cron("* * * * *", "UTC")
    assert jitter_problem(0, minutely) is None
    assert jitter_problem(59_999, minutely) is None
    assert jitter_problem(60_000, minutely) == (
        "60000 is not below the trigger's shortest period between occurrences, 60000 ms (1 min)"
    )
    assert jitter_problem(-1, minutely) == f"must be 0..{JITTER_MS_MAX}, got -1"
