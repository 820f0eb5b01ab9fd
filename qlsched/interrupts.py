"""How a Ctrl-C reaches a one-shot command's code, in one place (``qlsched.entry``
turns SIGTERM into the same SIGINT).

Under Trio, a command's body gets a SIGINT as the cancellation of its work
(``commands._common.run_command`` watches it): never as a KeyboardInterrupt raised at an
arbitrary line. One raised inside the trio-asyncio bridge's own machinery left the bridge
waiting for an asyncio task that would never finish (``migrate`` hung after a SIGTERM).

Two kinds of code need otherwise, and say so with these context managers:

- ``raising_sigint``: blocking code on the main thread with no Trio checkpoint (the local
  database's first start: ``flock``, initdb, the server's start) takes a Ctrl-C as the
  KeyboardInterrupt it always did, at once;
- ``uninterrupted``: the clean-up that such a KeyboardInterrupt runs (emptying a half-made
  data directory, stopping a server it started) is not cut short by a second Ctrl-C.

Neither touches signals off the main thread (only it may set handlers). Neutral ground:
no Trio here, so ``qlsched.embedded`` uses it too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _sigint_handler(handler: Any) -> Iterator[None]:
    if not _on_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def raising_sigint() -> Any:
    """A Ctrl-C raises KeyboardInterrupt in the block (blocking code without checkpoints).
    Leave it off wherever the block awaits: under Trio it must be a cancellation."""
    return _sigint_handler(signal.default_int_handler)


def uninterrupted() -> Any:
    """A Ctrl-C during the block is ignored: the block is clean-up already under way."""
    return _sigint_handler(signal.SIG_IGN)
