"""The blocking admin API mirrors the async one exactly."""

from __future__ import annotations

import inspect

from qlsched import admin
from qlsched.admin import aio, requests, runs, schedules, sync


def test_every_async_admin_function_has_a_blocking_twin_of_the_same_signature() -> None:
    """A script calls ``qlsched.admin.sync.X`` with the arguments ``await qlsched.admin.X``
    takes, and reads the same docstring; so does ``await qlsched.admin.aio.X`` from a running
    asyncio loop; a new async function without both twins fails here."""
    async_functions = {
        name: fn
        for module in (schedules, requests, runs)
        for name, fn in vars(module).items()
        if inspect.iscoroutinefunction(fn)
        and not name.startswith("_")
        and getattr(admin, name, None) is fn
    }
    assert set(async_functions) == set(sync.__all__)
    for name, fn in async_functions.items():
        twin = getattr(sync, name)
        assert not inspect.iscoroutinefunction(twin)
        assert inspect.signature(twin) == inspect.signature(fn), name
        assert twin.__doc__ == fn.__doc__
    assert set(async_functions) == set(aio.__all__)
    for name, fn in async_functions.items():
        twin = getattr(aio, name)
        assert inspect.iscoroutinefunction(twin), name
        assert inspect.signature(twin) == inspect.signature(fn), name
        assert twin.__doc__ == fn.__doc__
