"""The Edge profile's runtime: one process scheduling one SQLite file.

``root`` composes it (the file's run lock, the store, the scheduler, the HTTP endpoint,
the signals), ``scheduler`` runs the rounds, ``metrics`` counts them, ``http`` serves
health, readiness and metrics, ``lock`` keeps one runner per file. The store it runs on is
``qlsched.sqlite``; like it, nothing here imports the PostgreSQL adapter, the cluster,
asyncpg, trio-asyncio or hypercorn.
"""
