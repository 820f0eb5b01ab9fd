"""The profile-neutral core: cron, the misfire decision, fences, identity, outcomes, config.

Invariant: nothing here does I/O or imports ``qlsched.postgres`` / ``qlsched.cluster``; the
current time is always passed in as ``now_ms``, so a future Edge/SQLite profile can reuse it.
"""
