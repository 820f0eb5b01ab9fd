"""The cluster's metrics are the shared ``qlsched.metrics`` (kept importable here)."""

from __future__ import annotations

from qlsched.metrics import CONTENT_TYPE, AdmitCounts, Metrics, registry_reader

__all__ = ["CONTENT_TYPE", "AdmitCounts", "Metrics", "registry_reader"]
