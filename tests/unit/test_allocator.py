"""``qlsched.allocator``: glibc's mmap threshold stays where it starts (issue #27 item 6).

Each case runs in a fresh interpreter: the setting is process-wide and cannot be undone.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import qlsched.cli

PROBE = """
import ctypes, sys
from qlsched.allocator import hold_mmap_threshold

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS.split()]
libc.mallinfo2.restype = Info

held = hold_mmap_threshold() if sys.argv[1] == "hold" else None
libc.free(libc.malloc(4 << 20))  # a freed mapping: glibc would raise its threshold to 4 MiB
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)  # mapped only while the threshold stays at 128 KiB
print(held, libc.mallinfo2().hblks - before)
libc.free(block)
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's allocator",
)


def _probe(mode: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        env={**environ, **env},
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_the_threshold_no_longer_rises_after_a_large_block_is_freed() -> None:
    """Rule: once held, a 1 MiB block after a freed 4 MiB one is still its own mapping
    (returned to the system when freed); without it, glibc serves it from the heap."""
    assert _probe("hold") == "True 1"
    assert _probe("leave") == "None 0"


def test_a_threshold_the_user_set_wins() -> None:
    """Rule: with ``MALLOC_MMAP_THRESHOLD_`` in the environment nothing is changed (glibc
    read it at start; here 8 MiB, so the 1 MiB block comes from the heap)."""
    assert _probe("hold", MALLOC_MMAP_THRESHOLD_=str(8 << 20)) == "False 0"


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("qlsched.commands.run", ["run", "--claim-budget", "0"]),
        ("qlsched.commands.work", ["work", "--concurrency", "0"]),
        ("qlsched.allocator", ["ui", "--http", "nonsense"]),
        ("qlsched.commands.edge.run", ["edge", "run", "--db", "/nonexistent/edge.db"]),
    ],
)
def test_every_long_running_command_holds_the_threshold_first(
    monkeypatch: pytest.MonkeyPatch, module: str, argv: list[str]
) -> None:
    """Rule: ``run``, ``work``, ``ui`` and ``edge run`` hold the threshold before anything
    else (here: before refusing their bad input)."""
    held: list[bool] = []
    monkeypatch.setattr(
        importlib.import_module(module), "hold_mmap_threshold", lambda: held.append(True)
    )
    assert qlsched.cli.main(argv) != 0
    assert held == [True]
