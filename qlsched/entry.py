"""The process's entry point (``python -m qlsched`` and the ``qlsched`` script).

Only the standard library is imported before the signal handling is in place, so a Ctrl-C
at any moment, even while the command's modules load, ends the process with one line
(``qlsched: interrupted``, exit 130), never a traceback: ``KeyboardInterrupt`` is caught
here also when Trio delivers it inside an exception group. SIGTERM is turned into the same
interrupt (``run`` and ``edge run`` watch both signals themselves and stop in order), so a
command stopped by a service manager unwinds as for Ctrl-C: a local database it was
starting is stopped and its half-made data directory removed, and the start lock is
released. Once the command has its exit code, further signals are ignored: the exit is
already under way and bounded.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

from qlsched.exception_groups import interrupted


def _term_as_interrupt(signum: int, frame: FrameType | None) -> None:
    os.kill(os.getpid(), signal.SIGINT)


def main() -> int:
    signal.signal(signal.SIGTERM, _term_as_interrupt)
    try:
        from qlsched.cli import main as command_main

        code = command_main()
    except BaseException as exc:
        if not interrupted(exc):
            raise
        code = 130
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("qlsched: interrupted", file=sys.stderr, flush=True)  # noqa: T201
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code
