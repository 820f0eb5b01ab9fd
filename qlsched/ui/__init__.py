"""The dashboard (``qlsched ui``, see docs/contract.md): server-rendered pages over the
observer role, controls through the admin API, its templates and assets shipped inside this package.

Rooms: ``app`` (ASGI: sign-in, POST checks, routing), ``security`` (tokens, CSRF, origin),
``pages`` (GET), ``actions`` (POST, through ``qlsched.admin``), ``timeline`` (SVG),
``serve`` (the pool and hypercorn on Trio); the reads are ``qlsched.postgres.ui``.
"""
