"""Debian's chromium for the browser tests, installed on first use where we may.

Browsers cannot be downloaded here (Playwright's own download fails), so Playwright drives
the system's chromium by its path: ``QLSCHED_TEST_CHROMIUM``, else ``chromium`` on PATH.
When neither exists and the tests run as root on a Debian-like system, it is installed with
apt-get (what the README's test command needs on a fresh machine); otherwise the session
fails with the command to run. Never a skip: a test that cannot run its browser fails.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import pytest

ENV: Final = "QLSCHED_TEST_CHROMIUM"
INSTALL: Final = "apt-get install -y chromium"


def _found() -> str | None:
    given = os.environ.get(ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _apt_install() -> str:
    """``apt-get install chromium`` as root; the output of a failure, or ''."""
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    for command in (
        ["apt-get", *wait, "update", "-qq"],
        ["apt-get", *wait, "install", "-y", "-qq", "chromium"],
    ):
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if done.returncode != 0:
            return (done.stdout + done.stderr)[-2000:]
    return ""


def chromium_path() -> str:
    """The chromium to drive, installing Debian's when missing and allowed."""
    path = _found()
    if path is not None:
        return path
    if os.environ.get(ENV):
        pytest.fail(f"{ENV}={os.environ[ENV]} is not an executable")
    if os.geteuid() == 0 and shutil.which("apt-get"):
        # pytest-xdist workers start together: one installs, the others wait and find it.
        with open(Path(tempfile.gettempdir()) / "qlsched-chromium-install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = _found()
            failure = "" if path is not None else _apt_install()
        path = _found()
        if path is not None:
            return path
        pytest.fail(f"installing chromium with apt-get failed:\n{failure}")
    pytest.fail(
        f"the browser tests need chromium: run `sudo {INSTALL}` (Debian, Ubuntu) or set"
        f" {ENV} to a Chromium executable"
    )
