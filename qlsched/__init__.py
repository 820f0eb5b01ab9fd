"""qlsched: a clustered cron scheduler on PostgreSQL, embeddable in Trio services.

Embedding::

    config = qlsched.load_config(flags={"dsn": RUNTIME_DSN})
    async with qlsched.open_cluster_control(config) as control:
        ...  # your service; leaving the block stops the replica in order

or ``control = await nursery.start(qlsched.serve, config)``.

The public names are loaded lazily, so ``import qlsched.core`` (the profile-neutral core)
never loads asyncpg, trio-asyncio or hypercorn.
"""

from __future__ import annotations

import sys

_early_sigints: list[int] = []
"""SIGINTs (and SIGTERMs, the same interrupt) that arrived while ``python -m qlsched``
loaded, before ``qlsched.entry`` took over (it turns them into ``qlsched: interrupted`` or
hands them to a command's watch)."""


def _note_sigint(signum: int, frame: object) -> None:
    _early_sigints.append(signum)


def _started_as_main() -> bool:
    """True while ``python -m qlsched`` locates its module: Python sets ``argv[0]`` to
    ``-m`` until it has found it. Why here: this package's first lines are the first of
    our code to run, and a Ctrl-C raised as a KeyboardInterrupt in them (or in the modules
    they load) printed a traceback; an embedding program's signals are never touched."""
    if sys.argv[:1] != ["-m"]:
        return False
    argv = sys.orig_argv
    return any(
        (a == "-m" and argv[i + 1 : i + 2] == ["qlsched"]) or a == "-mqlsched"
        for i, a in enumerate(argv)
    )


if _started_as_main():
    # The C module, not ``signal``: importing that (and its enum) took milliseconds in
    # which a Ctrl-C still raised.
    try:
        import _signal as signal_c  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - an interpreter without it
        import signal as signal_c

    if signal_c.getsignal(signal_c.SIGINT) is signal_c.default_int_handler:
        signal_c.signal(signal_c.SIGINT, _note_sigint)
    # SIGTERM is the same interrupt (``qlsched.entry``): noted too, instead of its default
    # death (exit -15, no line) while the command's modules load on a slow machine.
    if signal_c.getsignal(signal_c.SIGTERM) == signal_c.SIG_DFL:
        signal_c.signal(signal_c.SIGTERM, _note_sigint)

import importlib  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

__version__ = "0.1.0"

_EXPORTS = {
    "ClusterControl": "qlsched.cluster.root",
    "open_cluster_control": "qlsched.cluster.root",
    "serve": "qlsched.cluster.root",
    "Config": "qlsched.core.config",
    "ConfigError": "qlsched.core.config",
    "load_config": "qlsched.settings",
    "DiagnosticSink": "qlsched.sinks:StreamSink",
    "SchemaNotReady": "qlsched.postgres.errors",
    "DatabaseUnavailable": "qlsched.postgres.errors",
}
__all__ = [
    "ClusterControl",
    "Config",
    "ConfigError",
    "DatabaseUnavailable",
    "DiagnosticSink",
    "SchemaNotReady",
    "load_config",
    "open_cluster_control",
    "serve",
]

if TYPE_CHECKING:
    from qlsched.cluster.root import ClusterControl, open_cluster_control, serve
    from qlsched.core.config import Config, ConfigError
    from qlsched.postgres.errors import DatabaseUnavailable, SchemaNotReady
    from qlsched.settings import load_config
    from qlsched.sinks import StreamSink as DiagnosticSink


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'qlsched' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    return getattr(importlib.import_module(module), attribute or name)
