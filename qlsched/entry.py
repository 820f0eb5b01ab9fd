"""The process's entry point (``python -m qlsched`` and the ``qlsched`` script).

Only the standard library is imported before the signal handling is in place, so a Ctrl-C
at any moment, even while the command's modules load, ends the process with one line
(``qlsched: interrupted``, exit 130), never a traceback: ``KeyboardInterrupt`` is caught
here also when Trio delivers it inside an exception group. SIGTERM is turned into the same
interrupt (``run`` and ``edge run`` watch both signals themselves and stop in order), so a
command stopped by a service manager unwinds as for Ctrl-C: a local database it was
starting is stopped and its half-made data directory removed, and the start lock is
released. Once the command has its exit code, further signals are ignored: the exit is
already under way and bounded. A KeyboardInterrupt that lands where Python cannot raise it
(a garbage-collected object's callback) is dropped without Python's "Exception ignored"
report: the interrupt that counts is the one that can unwind the command.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Final, NoReturn

from qlsched.exception_groups import interrupted

INTERRUPTED: Final = 130
"""The exit code of an interrupted command (128 + SIGINT), as a shell reports a Ctrl-C."""

WATCHING_COMMANDS: Final = frozenset({"run", "work"})
"""Commands whose first act in Trio is ``qlsched.signals.watch_signals``: a SIGINT that
arrives before the watch is in place is noted (``note_early_signal``) and handed to it,
instead of raised as a KeyboardInterrupt into start-up code that might swallow it (a
replica then ran on). Here, not in ``qlsched.signals``: ``next`` must not load Trio."""


def _term_as_interrupt(signum: int, frame: FrameType | None) -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _load_command() -> tuple[bool, str | None]:
    """Import the CLI and the chosen command's module with SIGINT only noted; True when a
    SIGINT arrived meanwhile. Why: a KeyboardInterrupt raised inside a dependency's import
    can be swallowed by its own bare ``except`` (a Ctrl-C 0.2 s after `run` started was
    lost that way, and the replica ran on), so none is raised while the modules load. A
    command that watches its signals (``WATCHING_COMMANDS``) keeps SIGINT noted until its
    watch takes over; the others get the default handler back (Trio's then turns a Ctrl-C
    into a KeyboardInterrupt that unwinds them). A command module that must import its
    dependencies in ``main`` (the parser imports it for its flags) names them in
    ``PRELOAD``: they load here too (``ui`` imported Trio after this, and a SIGTERM then
    ended it by SIGINT, exit -2). Also returns the command's name."""
    import qlsched

    noted = qlsched._early_sigints  # noted since the package's first line, under ``-m``
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    if previous is qlsched._note_sigint:
        previous = signal.default_int_handler
    name = None
    try:
        import importlib

        from qlsched.cli import COMMANDS, chosen_command

        name = chosen_command(sys.argv[1:])
        if name is not None:
            module = importlib.import_module(COMMANDS[name][0])
            for later in getattr(module, "PRELOAD", ()):  # what its main imports itself
                importlib.import_module(later)
    finally:
        if noted:  # the exit is under way: a second Ctrl-C must not interrupt its handling
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        elif name in WATCHING_COMMANDS:
            from qlsched.signals import note_early_signal

            signal.signal(signal.SIGINT, note_early_signal)
        else:
            signal.signal(signal.SIGINT, previous)
    return bool(noted), name


def _quiet_unraisable_interrupt(
    previous: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], None]:
    """``sys.unraisablehook`` that drops a KeyboardInterrupt and passes the rest on. Why:
    a second Ctrl-C 54 ms after the first landed in an import lock's weakref callback, run
    by the garbage collector as the command unwound, and Python printed its report of an
    unraisable exception (five lines naming ``_get_module_lock``) before ``qlsched:
    interrupted``. Such an interrupt cannot unwind anything; a first one lost there lets
    the command finish as if it never came, as Python does too, with its report."""

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        previous(unraisable)

    return hook


def script() -> NoReturn:
    """The process's entry (``python -m qlsched``, the ``qlsched`` script): ``main``, then
    the exit. An interrupted command ends with ``os._exit(130)`` once the exit handlers
    ran and the streams are flushed. Why: CPython notes a KeyboardInterrupt that left a
    string ``exec``/``eval`` (a dataclass's generated methods, while a module loads late)
    as never handled, although ``main`` caught it, and a normal exit then killed the
    process with SIGINT (exit -2, 4 times in 300 interrupted ``edge status``)."""
    code = main()
    if code != INTERRUPTED:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main() -> int:
    signal.signal(signal.SIGTERM, _term_as_interrupt)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable_interrupt(previous_hook)
    try:
        return _main()
    finally:  # signals are ignored by now: no interrupt can be raised after this
        sys.unraisablehook = previous_hook


def _main() -> int:
    try:
        interrupted_while_loading, _ = _load_command()
        if interrupted_while_loading:
            raise KeyboardInterrupt
        from qlsched.cli import main as command_main

        code = command_main()
        # Still inside the try: a signal that arrived as the command returned (its handler
        # runs at the next line Python executes; seen once: Trio re-raising a SIGINT left
        # pending in a receiver) is caught here, not raised past this function as a bare
        # KeyboardInterrupt, which Python turns into death by SIGINT (exit -2). Once
        # ignored, a signal that already arrived runs no handler at all.
        _ignore_signals()
    except BaseException as exc:
        while True:
            # CPython runs a pending signal's handler at a function's first line: a second
            # Ctrl-C can raise at the call's entry, before the function's own loop (below)
            # guards anything. It is the same interrupt: call again.
            try:
                is_interrupt = _signals_ignored_then_interrupted(exc)
            except KeyboardInterrupt:
                continue
            break
        if not is_interrupt:
            raise
        code = INTERRUPTED
        print("qlsched: interrupted", file=sys.stderr, flush=True)  # noqa: T201
    return code


def _signals_ignored_then_interrupted(exc: BaseException) -> bool:
    """Signals ignored, then whether ``exc`` is a Ctrl-C. Why a loop: a second Ctrl-C whose
    handler ran before the first's handling had ignored signals (0.1 ms apart, while a
    module loaded) raised its KeyboardInterrupt inside that handling, and Python printed
    it; it is the same interrupt, so the handling starts again."""
    while True:
        try:
            _ignore_signals()
            return interrupted(exc)
        except KeyboardInterrupt:
            continue


def _ignore_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
