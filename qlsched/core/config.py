"""Replica configuration: one frozen Struct, its bounds, and where each value came from.

Sources, each overriding the one before: defaults, a TOML file, ``QLSCHED_*`` environment
variables, command-line flags. Everything is validated here, before PostgreSQL is opened; a
bad value raises ``ConfigError`` naming the option, the bound and the source (exit code 2).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

import msgspec

from qlsched.core.tomlfile import TomlFileError, decode_toml, printable

CLAIM_BUDGET_HARD_CAP = 256
CONFIG_FILE_MAX_BYTES = 1024 * 1024
SECRET_FIELDS = frozenset({"dsn", "http_token"})
"""Options whose value is never echoed in a message (a DSN may carry a password)."""


class ConfigError(ValueError):
    """A configuration value out of bounds or of the wrong type; one line, exit code 2."""


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dsn: str | None = None
    owner: str = ""
    claim_budget: int = 16
    lease_ms: int = 30_000
    cadence_ms: int = 1_000
    stop_timeout_ms: int = 10_000
    idle_in_transaction_timeout_ms: int = 5_000
    admit_retries: int = 5
    http: str | None = None
    data_dir: str | None = None
    pg_bindir: str | None = None
    diagnostics: str | None = None
    """A file for diagnostic JSON lines; None means stderr."""
    http_token: str | None = None
    """A bearer token for ``/metrics`` and ``/v1/schedules`` (``QLSCHED_HTTP_TOKEN`` or the
    config file; no flag, so it never shows in ``ps``); None leaves them open."""

    def http_address(self) -> tuple[str, int] | None:
        if self.http is None:
            return None
        host, _, port = self.http.rpartition(":")
        return host.strip("[]"), int(port)


# option -> (low, high) inclusive
BOUNDS: dict[str, tuple[int, int]] = {
    "claim_budget": (1, CLAIM_BUDGET_HARD_CAP),
    "lease_ms": (1_000, 3_600_000),
    "cadence_ms": (10, 600_000),
    "stop_timeout_ms": (0, 3_600_000),
    "idle_in_transaction_timeout_ms": (100, 3_600_000),
    "admit_retries": (0, 100),
}

FIELDS = frozenset(Config.__struct_fields__)
_INT_FIELDS = frozenset(BOUNDS)


def default_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` (control characters escaped) cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _coerce(name: str, value: Any, source: str) -> Any:
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


def load_config(
    *,
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Config:
    """Merge the sources and validate. ``flags`` holds only the flags actually given."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if file is not None:
        try:
            with open(file, "rb") as fh:
                raw = fh.read(CONFIG_FILE_MAX_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"config file {file}: {exc.strerror}") from None
        values = decode_config_file(raw, f"config file {file}")
        origin = dict.fromkeys(values, f"config file {file}")
    environ = os.environ if env is None else env
    for name in FIELDS:
        var = f"QLSCHED_{name.upper()}"
        if var in environ:
            values[name] = _coerce(name, environ[var], f"environment {var}")
            origin[name] = f"environment {var}"
    for name, value in (flags or {}).items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        values[name] = _coerce(name, value, f"flag {flag}")
        origin[name] = f"flag {flag}"
    if not values.get("owner"):
        values["owner"] = default_owner()
    config = Config(**values)
    validate(config, origin)
    return config


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
        values[name] = _coerce(name, value, source)
    return values


def validate(config: Config, origin: Mapping[str, str] | None = None) -> None:
    """Check every bound and relation; raise ConfigError naming option, bound and source."""
    origin = origin or {}

    def src(name: str) -> str:
        return origin.get(name, "default")

    for name, (low, high) in BOUNDS.items():
        value = getattr(config, name)
        if not low <= value <= high:
            raise ConfigError(f"{name}={value} is out of bounds {low}..{high} (from {src(name)})")
    if config.lease_ms <= config.stop_timeout_ms:
        raise ConfigError(
            f"lease_ms={config.lease_ms} must be greater than stop_timeout_ms="
            f"{config.stop_timeout_ms} (from {src('lease_ms')}, {src('stop_timeout_ms')})"
        )
    if config.lease_ms <= config.cadence_ms:
        raise ConfigError(
            f"lease_ms={config.lease_ms} must be greater than cadence_ms="
            f"{config.cadence_ms} (from {src('lease_ms')}, {src('cadence_ms')})"
        )
    if config.idle_in_transaction_timeout_ms >= config.lease_ms:
        raise ConfigError(
            f"idle_in_transaction_timeout_ms={config.idle_in_transaction_timeout_ms} must be "
            f"below lease_ms={config.lease_ms} (from {src('idle_in_transaction_timeout_ms')})"
        )
    if config.dsn is not None and not config.dsn.strip():
        # An empty DSN is a mistake (an unset shell variable), never "use the embedded one".
        raise ConfigError(f"dsn: must not be empty (from {src('dsn')})")
    if not config.owner or len(config.owner) > 200:
        raise ConfigError(f"owner must be 1..200 characters (from {src('owner')})")
    if config.http_token is not None and not (
        config.http_token.strip()
        and config.http_token.isascii()
        and config.http_token.isprintable()
        and config.http_token == config.http_token.strip()
    ):
        # Never echo the value: it is a secret.
        raise ConfigError(
            "http_token: must be non-empty printable ASCII without surrounding spaces"
            f" (from {src('http_token')})"
        )
    if config.http is not None:
        host, sep, port = config.http.rpartition(":")
        digits = port.isascii() and port.isdigit()
        if not sep or not host or not digits or not 0 <= int(port) <= 65535:
            raise ConfigError(
                f"http={_shown(config.http)}: expected HOST:PORT with PORT 0..65535"
                f" (from {src('http')})"
            )


def encode_config(config: Config) -> bytes:
    """Round-trippable JSON form (used by tests and ``status --json``)."""
    return msgspec.json.encode(config)
