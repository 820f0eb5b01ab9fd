"""The demo's plan: sizes, timings and where its database lives, and the example triggers.

The lease, cadence and role timeouts are chosen so that a crash and the takeover that
follows it both fit in a short window; ``Target`` says which server the demo uses.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import msgspec

from qlsched.postgres.timeouts import RoleTimeouts

CADENCE_MS = 250
STOP_TIMEOUT_MS = 2_000
STOP_SLACK_S = 3.0
"""Beyond a replica's stop deadline, how long to wait for it before SIGKILL."""
EMBEDDED_LEASE_MS = 4_000
EMBEDDED_TIMEOUTS = RoleTimeouts(
    idle_in_transaction_ms=2_000, lock_timeout_ms=1_000, statement_timeout_ms=2_000
)
"""The runtime role's timeouts must stay below the lease (readiness checks): on our own
server they are lowered with it."""
SERVER_LEASE_MS = 6_000
"""On a ``--dsn`` server the role timeouts keep init-db's defaults (5 s): the roles are
cluster-wide and may serve a real deployment there, so the lease stays above them."""
KILL_AT = 0.4
HUNT_SHARE = 0.3
"""Up to this share of the window is spent looking for a moment when a replica holds claims
(one chance per second, when occurrences fall due; about one in three succeeds), as long as
the lease can still expire and show a takeover before the end; then one is killed anyway."""
SETTLE_S = 0.05
"""After SIGSTOP, how long to let a statement already in the server finish before looking."""
START_TIMEOUT_S = 60.0
MONITOR_PERIOD_S = 0.1
CLEANUP_S = 15.0
MIN_REPLICAS, MAX_REPLICAS = 2, 32
MIN_SECONDS, MAX_SECONDS = 5, 86_400
TRIGGERS_FILE = "triggers.toml"


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    replicas: int
    seconds: int
    lease_ms: int
    timeouts: RoleTimeouts
    cadence_ms: int = CADENCE_MS
    stop_timeout_ms: int = STOP_TIMEOUT_MS

    @property
    def names(self) -> list[str]:
        return [f"replica-{i}" for i in range(1, self.replicas + 1)]

    def cadence_of(self, index: int) -> int:
        """Replica ``index`` (0-based) runs a round every 250, 300, ... 450 ms: with equal
        cadences whichever replica's rounds happen to come first after each second would
        claim nearly everything; staggered ones take turns."""
        return self.cadence_ms + 50 * (index % 5)


def triggers_file() -> Traversable:
    """``examples/triggers.toml`` as packaged in the wheel (``qlsched/_examples``), else the
    source tree's, so a checkout and an installed package publish the same file."""
    packaged = resources.files("qlsched").joinpath("_examples", TRIGGERS_FILE)
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "examples" / TRIGGERS_FILE


def triggers_source() -> tuple[str, bytes]:
    """The example triggers: a name to show and the file's bytes (OSError when missing)."""
    return str(Path("examples") / TRIGGERS_FILE), triggers_file().read_bytes()


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where the demo's database lives."""

    superuser_dsn: str
    database: str
    drop_after: bool
    """A database the demo created on someone's server (``--dsn``): dropped at the end."""
    want_passwords: bool | None
