"""The dashboard's addresses. Ids in paths are the scheduler's ids (``[a-z0-9][a-z0-9_.-]*``),
so a path that names anything else is a 404 before any handler runs."""

from __future__ import annotations

from typing import Final

from qlsched.ui import actions, pages
from qlsched.ui.app import Route, route

_ID: Final = r"([a-z0-9][a-z0-9_.-]{0,62})"
_KEY: Final = f"/schedules/{_ID}/{_ID}"
_UUID: Final = r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"

ROUTES: Final[list[Route]] = [
    route("GET", r"/", pages.overview),
    route("GET", r"/schedules", pages.schedules),
    route("GET", r"/schedules/bulk", actions.bulk_preview),
    route("POST", r"/schedules/bulk", actions.bulk),
    route("GET", _KEY, pages.schedule),
    route("POST", _KEY + "/pause", actions.pause),
    route("POST", _KEY + "/resume", actions.resume),
    route("POST", _KEY + "/trigger", actions.trigger_now),
    route("GET", _KEY + "/backfill", actions.backfill_preview),
    route("POST", _KEY + "/backfill", actions.backfill),
    route("GET", r"/runs", pages.runs),
    route("GET", f"/runs/{_UUID}", pages.run),
    route("POST", f"/runs/{_UUID}/cancel", actions.cancel_run),
    route("GET", r"/requests", pages.requests),
    route("GET", r"/audit", pages.audit),
]
