"""The admin calls ``sync`` and ``aio`` each wrap, listed once: both surfaces name the same
calls (their ``__all__``), and a test holds each twin to its async function."""

from __future__ import annotations

from typing import Final

from qlsched.admin import requests, runs, schedules

CALLS: Final = (
    schedules.publish,
    schedules.pause,
    schedules.resume,
    schedules.list_schedules,
    requests.trigger_now,
    requests.backfill,
    runs.cancel,
    runs.list_runs,
)
