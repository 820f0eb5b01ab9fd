"""Replica configuration: one frozen Struct, its bounds, and the options the CLI offers.

A ``Config`` checks itself when it is built (``__post_init__``): a Config that exists is
within every bound and relation, so nothing downstream checks or clamps it again. A bad value
raises ``ConfigError`` naming the option and the bound (exit code 2); ``qlsched.settings``,
which merges the file, the environment and the flags, names where the value came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec
import msgspec.inspect
from msgspec import Meta

from qlsched.core.address import parse_host_port
from qlsched.core.tomlfile import TomlFileError, decode_toml, printable

CLAIM_BUDGET_HARD_CAP = 256
CONFIG_FILE_MAX_BYTES = 1024 * 1024
SECRET_FIELDS = frozenset({"dsn", "http_token"})
"""Options whose value is never echoed in a message (a DSN may carry a password)."""


class ConfigError(ValueError):
    """A configuration value out of bounds or of the wrong type; one line, exit code 2."""


class InvalidConfig(ConfigError):
    """A bound or relation a Config breaks, naming the options involved and their sources."""

    def __init__(
        self, problem: str, options: tuple[str, ...], origin: Mapping[str, str] | None = None
    ) -> None:
        sources = ", ".join((origin or {}).get(name, "default") for name in options)
        super().__init__(f"{problem} (from {sources})")
        self.problem = problem
        self.options = options

    def sourced(self, origin: Mapping[str, str]) -> InvalidConfig:
        """The same error naming where each option came from (a file, a variable, a flag)."""
        return InvalidConfig(self.problem, self.options, origin)


LOOKAHEAD_LEASE_SHARE: Final = 4
"""A claim taken ahead keeps at least three quarters of its lease for the admit."""


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dsn: str | None = None
    owner: str = ""
    """Required (1..200 characters); ``qlsched.settings`` fills in HOST-PID."""
    claim_budget: Annotated[int, Meta(ge=1, le=CLAIM_BUDGET_HARD_CAP)] = 16
    catch_up_budget: Annotated[int, Meta(ge=1, le=CLAIM_BUDGET_HARD_CAP)] = CLAIM_BUDGET_HARD_CAP
    """What a round may grow to while the replica catches up (each full, quick round
    doubles the next, from ``claim_budget``); ``claim_budget`` itself turns growth off."""
    lease_ms: Annotated[int, Meta(ge=1_000, le=3_600_000)] = 30_000
    cadence_ms: Annotated[int, Meta(ge=10, le=600_000)] = 1_000
    lookahead_ms: Annotated[int, Meta(ge=0, le=60_000)] = 250
    """Rows due within this many ms are claimed and decided ahead, and admitted when due by
    the database clock: at the due time only the admit is left to do. 0 turns it off."""
    stop_timeout_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 10_000
    idle_in_transaction_timeout_ms: Annotated[int, Meta(ge=100, le=3_600_000)] = 5_000
    """The replica's sessions' ``idle_in_transaction_session_timeout``."""
    admit_retries: Annotated[int, Meta(ge=0, le=100)] = 5
    http: str | None = None
    data_dir: str | None = None
    pg_bindir: str | None = None
    diagnostics: str | None = None
    """A file for diagnostic JSON lines; None means stderr."""
    http_token: str | None = None
    """A bearer token for ``/metrics`` and ``/v1/schedules`` (``QLSCHED_HTTP_TOKEN`` or the
    config file; no flag, so it never shows in ``ps``); None leaves them open."""

    def __post_init__(self) -> None:
        found = _problem(self)
        if found is not None:
            raise InvalidConfig(*found)

    def http_address(self) -> tuple[str, int] | None:
        if self.http is None:
            return None
        address = parse_host_port(self.http)
        assert address is not None  # checked when the Config was built
        return address


def _bounds() -> dict[str, tuple[int, int]]:
    bounds: dict[str, tuple[int, int]] = {}
    info = msgspec.inspect.type_info(Config)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        kind = field.type
        if isinstance(kind, msgspec.inspect.IntType) and kind.ge is not None:
            assert kind.le is not None
            bounds[field.name] = (kind.ge, kind.le)
    return bounds


BOUNDS: Final[Mapping[str, tuple[int, int]]] = _bounds()
"""Option -> (low, high), inclusive: read from the ``Meta`` on the Config's fields."""

FIELDS = frozenset(Config.__struct_fields__)
_INT_FIELDS = frozenset(BOUNDS)
_DEFAULTS: Final[Mapping[str, Any]] = dict(
    zip(Config.__struct_fields__, Config.__struct_defaults__, strict=True)
)


_BUDGET = "{}..{}".format(*BOUNDS["claim_budget"])
FLAGS: Final[Mapping[str, str]] = {
    "dsn": "PostgreSQL DSN (runtime); default: the local database",
    "pg_bindir": "PostgreSQL server binaries for the embedded database",
    "data_dir": "data directory of the local database (qlsched local)",
    "owner": "this replica's owner name (default HOST-PID)",
    "claim_budget": f"rows claimed per round ({_BUDGET}, default {_DEFAULTS['claim_budget']})",
    "catch_up_budget": (
        f"rows a round may grow to while catching up (claim budget..{CLAIM_BUDGET_HARD_CAP},"
        f" default {_DEFAULTS['catch_up_budget']}; the claim budget turns growth off)"
    ),
    "lease_ms": f"claim lease (default {_DEFAULTS['lease_ms']})",
    "cadence_ms": f"round cadence (default {_DEFAULTS['cadence_ms']})",
    "lookahead_ms": (
        f"claim rows due within this many ms ahead, admit them when due (default"
        f" {_DEFAULTS['lookahead_ms']}; 0: off)"
    ),
    "stop_timeout_ms": f"drain deadline on stop (default {_DEFAULTS['stop_timeout_ms']})",
    "http": "HOST:PORT for /healthz, /readyz, /metrics, /v1/schedules",
    "diagnostics": "file for diagnostic JSON lines (default stderr)",
}
"""The options ``qlsched run`` takes as flags (``flag_of``), with their help; the others
come from the environment or the file only."""


def flag_of(name: str) -> str:
    """The command-line flag of an option: ``claim_budget`` is ``--claim-budget``."""
    return "--" + name.replace("_", "-")


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` (control characters escaped) cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def coerce(name: str, value: Any, source: str) -> Any:
    """``value`` for option ``name`` as its type (an integer from a string too), or
    ``ConfigError`` naming ``source``."""
    if name in SECRET_FIELDS and value is not None and not isinstance(value, str):
        raise ConfigError(f"{name}: expected a string (from {source})")
    if name in _INT_FIELDS:
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected an integer, got {_shown(value)} (from {source})")
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                raise ConfigError(
                    f"{name}: expected an integer, got {_shown(value)} (from {source})"
                ) from None
        if not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {_shown(value)} (from {source})")
        return value
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name}: expected a string, got {_shown(value)} (from {source})")
    return value


def decode_config_file(raw: bytes, source: str) -> dict[str, Any]:
    """The options a config file sets (keys at the top level or under ``[qlsched]``),
    coerced but not yet validated together.

    Raises:
        ConfigError: the file is too large, too deeply nested, not TOML, or names an
            unknown option or a value of the wrong type (one line, naming ``source``).
    """
    try:
        data = decode_toml(raw, max_bytes=CONFIG_FILE_MAX_BYTES)
    except TomlFileError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    section = data.get("qlsched", data)
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: [qlsched] must be a table")
    values: dict[str, Any] = {}
    for key, value in section.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"{printable(key)}: unknown option (from {source})")
        values[name] = coerce(name, value, source)
    return values


def _problem(config: Config) -> tuple[str, tuple[str, ...]] | None:
    """The first bound or relation ``config`` breaks, and the options it names."""
    for name, (low, high) in BOUNDS.items():
        value = getattr(config, name)
        if not low <= value <= high:
            return f"{name}={value} is out of bounds {low}..{high}", (name,)
    if config.catch_up_budget < config.claim_budget:
        return (
            f"catch_up_budget={config.catch_up_budget} must be at least "
            f"claim_budget={config.claim_budget}",
            ("catch_up_budget", "claim_budget"),
        )
    for other in ("stop_timeout_ms", "cadence_ms"):
        if config.lease_ms <= getattr(config, other):
            return (
                f"lease_ms={config.lease_ms} must be greater than {other}={getattr(config, other)}",
                ("lease_ms", other),
            )
    if config.lookahead_ms * LOOKAHEAD_LEASE_SHARE > config.lease_ms:
        return (
            f"lookahead_ms={config.lookahead_ms} must be at most a quarter of"
            f" lease_ms={config.lease_ms}",
            ("lookahead_ms", "lease_ms"),
        )
    if config.idle_in_transaction_timeout_ms >= config.lease_ms:
        return (
            f"idle_in_transaction_timeout_ms={config.idle_in_transaction_timeout_ms} must be "
            f"below lease_ms={config.lease_ms}",
            ("idle_in_transaction_timeout_ms",),
        )
    if config.dsn is not None and not config.dsn.strip():
        # An empty DSN is a mistake (an unset shell variable), never "use the embedded one".
        return "dsn: must not be empty", ("dsn",)
    if not config.owner or len(config.owner) > 200:
        return "owner must be 1..200 characters", ("owner",)
    if config.http_token is not None and not (
        config.http_token.strip()
        and config.http_token.isascii()
        and config.http_token.isprintable()
        and config.http_token == config.http_token.strip()
    ):
        # Never echo the value: it is a secret.
        return (
            "http_token: must be non-empty printable ASCII without surrounding spaces",
            ("http_token",),
        )
    if config.http is not None and parse_host_port(config.http) is None:
        return f"http={_shown(config.http)}: expected HOST:PORT with PORT 0..65535", ("http",)
    return None
