"""Controls the dashboard offers only when this qlsched has them.

Cancelling a Run belongs to the worker (contract, the worker): when ``qlsched.admin``
exports ``cancel(dsn, run_id, *, note=None, actor=None)``, the Run page shows a Cancel button
for a Run that has not finished and the action calls it with the signed-in user as actor;
until then there is no button and a POST to the cancel address answers 404. The outcome is
shown by its ``message()`` when it has one, else by its text.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

CancelRun = Callable[..., Awaitable[Any]]


def cancel_function() -> CancelRun | None:
    """``qlsched.admin.cancel`` when this version has it, else None."""
    admin = importlib.import_module("qlsched.admin")
    found = getattr(admin, "cancel", None)
    return cast(CancelRun, found) if callable(found) else None


def cancel_available() -> bool:
    return cancel_function() is not None


async def cancel(dsn: str, run_id: uuid.UUID, *, note: str | None, actor: str) -> str | None:
    """Cancel ``run_id`` through the admin API; the outcome as one line, None when this
    version cannot cancel."""
    fn = cancel_function()
    if fn is None:
        return None
    outcome = await fn(dsn, str(run_id), note=note, actor=actor)
    message = getattr(outcome, "message", None)
    return str(message()) if callable(message) else str(outcome)
