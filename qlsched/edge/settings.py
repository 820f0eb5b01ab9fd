"""The Edge scheduler's settings: defaults written once, validated once when built.

``edge run``'s flags build an ``EdgeSettings`` from the options given (the defaults here
fill the rest) and everything downstream trusts it: the scheduler never re-checks or
clamps a value.
"""

from __future__ import annotations

import os
import socket
from typing import Final

import msgspec

from qlsched.core.address import parse_host_port
from qlsched.core.config import BOUNDS, ConfigError, flag_of

EDGE_CADENCE_MS: Final = 1_000
EDGE_CLAIM_BUDGET: Final = 256
"""Rows per round. Larger than the cluster's 16: one writer has no lease to contend for,
and each round costs one fsync, so bigger rounds drain a burst with fewer."""


def default_owner() -> str:
    """``edge-HOST-PID``: the name recorded on admitted Runs when none is given."""
    return f"edge-{socket.gethostname()}-{os.getpid()}"


class EdgeSettings(msgspec.Struct, frozen=True, kw_only=True):
    cadence_ms: int = EDGE_CADENCE_MS
    claim_budget: int = EDGE_CLAIM_BUDGET
    owner: str = msgspec.field(default_factory=default_owner)

    def __post_init__(self) -> None:
        """``ConfigError`` (exit 2) naming the first option out of its bounds (the
        cluster's bounds for the same options)."""
        for name in ("cadence_ms", "claim_budget"):
            low, high = BOUNDS[name]
            value = getattr(self, name)
            if not low <= value <= high:
                raise ConfigError(f"{flag_of(name)}={value} is out of bounds {low}..{high}")
        if not self.owner or len(self.owner) > 200:
            raise ConfigError("--owner must be 1..200 characters")


def bounds_help(name: str, what: str, default: int) -> str:
    """A flag's help: ``what (low..high, default N)`` from the one table of bounds."""
    low, high = BOUNDS[name]
    return f"{what} ({low}..{high}, default {default})"


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); ``ConfigError`` (exit 2) otherwise."""
    address = parse_host_port(text)
    if address is None:
        raise ConfigError(f"--http={text}: expected HOST:PORT")
    return address
