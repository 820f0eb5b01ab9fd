"""Where a replica's ``Config`` comes from: defaults, a TOML file, ``QLSCHED_*`` environment
variables, command-line flags, each overriding the one before.

This is the I/O side of configuration (the file is read, the environment and the host name
are looked up here); ``qlsched.core.config`` holds the Config, its bounds and their checks.
A bad value raises ``ConfigError`` naming the option, the bound and the source (exit code 2).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping
from typing import Any

from qlsched.core.config import (
    CONFIG_FILE_MAX_BYTES,
    FIELDS,
    Config,
    ConfigError,
    InvalidConfig,
    coerce,
    decode_config_file,
    flag_of,
)


def default_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def read_config_file(file: str) -> dict[str, Any]:
    """The options ``file`` sets, coerced; ``ConfigError`` when it cannot be read."""
    source = f"config file {file}"
    try:
        with open(file, "rb") as fh:
            raw = fh.read(CONFIG_FILE_MAX_BYTES + 1)  # one byte over: decode says too large
    except OSError as exc:
        raise ConfigError(f"{source}: {exc.strerror}") from None
    return decode_config_file(raw, source)


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
        values = read_config_file(file)
        origin = dict.fromkeys(values, f"config file {file}")
    environ = os.environ if env is None else env
    for name in FIELDS:
        var = f"QLSCHED_{name.upper()}"
        if var in environ:
            values[name] = coerce(name, environ[var], f"environment {var}")
            origin[name] = f"environment {var}"
    for name, value in (flags or {}).items():
        if value is None:
            continue
        source = f"flag {flag_of(name)}"
        values[name] = coerce(name, value, source)
        origin[name] = source
    if not values.get("owner"):
        values["owner"] = default_owner()
    try:
        return Config(**values)
    except InvalidConfig as exc:
        raise exc.sourced(origin) from None


def given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The config options among a command's parsed arguments (None when not given)."""
    return {name: getattr(args, name) for name in FIELDS if hasattr(args, name)}
