"""The C allocator's one setting for the long-running commands (``run``, ``work``, ``edge
run``, ``ui``): glibc's mmap threshold, held where it starts.

glibc serves a block above the threshold (128 KiB at start) with its own mapping, returned to
the system when freed, and then raises the threshold to the size of that freed block. A
replica's round handles a few such blocks (a 256-row claim's reply, the admit's arrays); once
the threshold had risen they came from the heap instead, and the heap's top, pinned by
smaller blocks still alive above them, did not shrink: over a burst a replica's RSS rose 5-6 %
and stayed there. Held fixed (setting it turns glibc's adjustment off), the same burst rose
under 2 % (docs/performance.md, "Memory").

A user's own ``MALLOC_MMAP_THRESHOLD_`` wins (glibc reads it at start and this leaves it).
Elsewhere (no glibc, not Linux) this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Final

M_MMAP_THRESHOLD: Final = -3
"""``mallopt``'s parameter number for the threshold (glibc's malloc.h)."""
MMAP_THRESHOLD_BYTES: Final = 128 * 1024
"""glibc's own starting value, kept instead of raised."""
ENVIRONMENT: Final = "MALLOC_MMAP_THRESHOLD_"


def hold_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at its starting value; True when it was set here."""
    if not sys.platform.startswith("linux") or ENVIRONMENT in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a C library without mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
