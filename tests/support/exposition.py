"""Our own ``/metrics`` read back in tests. Every qlsched series carries its target's
profile as a label (``qlsched.metrics.ProfileRegistry``), so the readers here check it and
then leave it out of the keys the tests compare."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def qlsched_samples(text: str) -> list[Sample]:
    """Every sample of a ``qlsched_`` family in a text exposition."""
    return [
        s
        for family in text_string_to_metric_families(text)
        if family.name.startswith("qlsched_")
        for s in family.samples
    ]


def profile_problems(text: str, profile: str) -> list[str]:
    """The ``qlsched_`` samples whose ``profile`` label is missing or not ``profile``."""
    return [
        f"{s.name}{s.labels}" for s in qlsched_samples(text) if s.labels.get("profile") != profile
    ]


def without_profile(series: str, profile: str) -> str:
    """A text line's series, ``name{a="1",profile="cluster"}``, as ``name{a="1"}`` (a
    series with no other label as ``name``); fails if a qlsched series lacks the label."""
    name, brace, inside = series.partition("{")
    pairs = inside.removesuffix("}").split(",") if brace else []
    mark = f'profile="{profile}"'
    assert not name.startswith("qlsched_") or mark in pairs, series
    kept = [p for p in pairs if p != mark]
    return f"{name}{{{','.join(kept)}}}" if kept else name
