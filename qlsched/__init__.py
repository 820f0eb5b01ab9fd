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

import importlib
from typing import TYPE_CHECKING, Any

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
