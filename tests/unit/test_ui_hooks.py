"""The dashboard's cancel hook: offered only when the admin API has ``cancel``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import qlsched.admin
from qlsched.ui import hooks


async def test_cancel_is_offered_only_when_the_admin_api_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule: without ``qlsched.admin.cancel`` there is no cancel (None, no button); with
    it, the hook calls it with the DSN, the Run's id as text, the note and the signed-in
    user, and shows the outcome's ``message()``."""
    monkeypatch.delattr(qlsched.admin, "cancel", raising=False)
    assert not hooks.cancel_available()
    run_id = uuid.uuid4()
    assert await hooks.cancel("dsn", run_id, note=None, actor="alice") is None
    calls: list[tuple[Any, ...]] = []

    class Outcome:
        def message(self) -> str:
            return "cancel requested"

    async def cancel_run(dsn: str, rid: str, *, note: str | None, actor: str) -> Outcome:
        calls.append((dsn, rid, note, actor))
        return Outcome()

    monkeypatch.setattr(qlsched.admin, "cancel", cancel_run, raising=False)
    assert hooks.cancel_available()
    assert await hooks.cancel("dsn", run_id, note="stuck", actor="alice") == "cancel requested"
    assert calls == [("dsn", str(run_id), "stuck", "alice")]
