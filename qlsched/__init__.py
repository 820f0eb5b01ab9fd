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
    "load_config": "qlsched.core.config",
    "DiagnosticSink": "qlsched.core.diagnostics",
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
    from qlsched.core.config import Config, ConfigError, load_config
    from qlsched.core.diagnostics import DiagnosticSink
    from qlsched.postgres.errors import DatabaseUnavailable, SchemaNotReady


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'qlsched' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
