"""Jinja2 templates (shipped in the wheel, ``qlsched/ui/templates``) with autoescape on.

Every value a page shows goes through Jinja's HTML escaping, ids and notes included; no
template marks anything safe. Times are UTC, to the second, as ``status`` prints them.
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from importlib import resources
from typing import Any

import jinja2

from qlsched.ui.web import url


def iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(ms: int | None) -> str:
    """``850 ms``, ``12.5 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if ms is None:
        return "-"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    if ms < 1000:
        return f"{sign}{ms} ms"
    if ms < 60_000:
        return f"{sign}{ms / 1000:.1f} s"
    s = ms // 1000
    if s < 3600:
        return f"{sign}{s // 60} min {s % 60} s"
    if s < 86_400:
        return f"{sign}{s // 3600} h {s % 3600 // 60} min"
    return f"{sign}{s // 86_400} d {s % 86_400 // 3600} h"


def ago(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    if ms > now_ms:
        return "in " + duration(ms - now_ms)
    return duration(now_ms - ms) + " ago"


@cache
def environment() -> jinja2.Environment:
    folder = resources.files("qlsched.ui").joinpath("templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # shipped templates never change under a running process
    )
    env.filters.update(iso=iso, duration=duration)
    env.globals.update(ago=ago, url=url)
    return env


def render(template: str, **context: Any) -> bytes:
    return environment().get_template(template).render(**context).encode("utf-8")
