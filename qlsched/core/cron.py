"""Cron expressions evaluated in an IANA zone with Vixie cron's DST rule (stub: see issue)."""

from __future__ import annotations

import msgspec


class CronError(ValueError):
    """An expression or zone that cannot be used; the message names the field."""


class CronSchedule(msgspec.Struct, frozen=True):
    expression: str
    timezone: str


def parse_cron(expression: str, timezone: str = "UTC") -> CronSchedule:
    raise NotImplementedError


def next_after(schedule: CronSchedule, after_ms: int) -> int:
    raise NotImplementedError
