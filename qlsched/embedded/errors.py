"""The embedded server's one error type: a one-line message a command can print."""

from __future__ import annotations


class EmbeddedError(RuntimeError):
    """The embedded server could not be found, started or stopped; a one-line message."""


class PortTaken(EmbeddedError):
    pass
