"""The Edge profile's store: one SQLite file, one writer process, no server (docs/contract.md §12).

Layering: ``qlsched.core`` (cron, decide, keys, outcomes), then this package (the SQLite
adapter: a store and nothing else), then the Edge runtime ``qlsched.edge`` (rounds, HTTP,
the run lock) and ``qlsched.commands.edge``. Nothing here imports ``qlsched.edge``,
``qlsched.postgres``, ``qlsched.cluster``, asyncpg, trio-asyncio or hypercorn.

Invariant: a compare-and-set on the durable cursor (trigger revision, state version and
``next_fire_at_ms``) fences every write, in the same ``BEGIN IMMEDIATE`` transaction as the
Run, its Attempt and its two events: all or nothing. There is no lease: one process per
file is enforced by an OS lock (``qlsched.edge.lock``), not by the rows. Every cursor write
also writes the cursor's due time (``due_at_ms``: the cursor plus its jitter,
``core.jitter``; SQLite has no SHA-256 for a generated column), which a round reads rows by.
"""
