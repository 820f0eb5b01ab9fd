"""Cluster control: the only package that owns tasks and timers.

``coordinator`` runs one bounded round (claim, decide, admit), ``lifecycle`` the cadence and
the bounded stop, ``metrics`` one replica's Prometheus registry, ``http`` the admission
endpoints, ``root`` the composition root (startup and stop order).
"""
