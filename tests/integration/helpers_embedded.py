"""A parent process for test_embedded.py: start a server, report it, wait to be signalled.

Usage: ``python helpers_embedded.py MODE DATA_DIR`` with DATA_DIR ``-`` for an ephemeral server.

* ``context``: inside ``open_embedded``, with SIGTERM turned into ``SystemExit`` the way a
  caller's handler does (SIGINT raises ``KeyboardInterrupt`` by default).
* ``start``: ``start_embedded`` and no cleanup of its own, for SIGKILL tests.
* ``fork``: inside ``open_embedded``, fork a child that exits through the block; report
  whether the server and its directory survived the child (prints only that line).

Otherwise prints one JSON line (pid, data_dir, socket_dir), then sleeps until signalled; ``context``
then prints whether the server was stopped by the time the exception left the block.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from qlsched.embedded import EmbeddedPostgres, open_embedded, start_embedded


def _report(server: EmbeddedPostgres) -> None:
    info = {
        "pid": server.pid,
        "data_dir": str(server.data_dir),
        "socket_dir": str(server.socket_dir),
    }
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    mode, where = argv
    data_dir = None if where == "-" else where
    if mode == "context":
        signal.signal(signal.SIGTERM, _on_sigterm)
        pid = 0
        try:
            with open_embedded(data_dir) as server:
                pid = server.pid
                _report(server)
                while True:
                    time.sleep(3600)
        except BaseException:
            # Reported before the exception propagates further, so that the test can tell
            # the context manager's stop from the atexit hook's.
            alive = Path(f"/proc/{pid}").exists() and "\nState:\tZ" not in _status(pid)
            sys.stdout.write(json.dumps({"stopped_by_context_manager": not alive}) + "\n")
            sys.stdout.flush()
            raise
    if mode == "fork":
        with open_embedded(data_dir) as server:
            child = os.fork()
            if child == 0:
                # The child leaves the block and exits normally: atexit hooks run too.
                sys.exit(0)
            os.waitpid(child, 0)
            alive = Path(f"/proc/{server.pid}").exists()
            report = {"server_alive": alive, "dir_kept": server.data_dir.is_dir()}
            sys.stdout.write(json.dumps(report) + "\n")
        return 0
    if mode == "start":
        _report(start_embedded(data_dir))
        while True:
            time.sleep(3600)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
