"""A diagnostic sink that keeps what it is given, for tests to read back."""

from __future__ import annotations

import msgspec

from qlsched.core.diagnostics import Diagnostic


class MemorySink:
    """Keeps diagnostics in ``items`` (stamped with ``replica`` like the stream sink)."""

    def __init__(self, *, replica: str = "") -> None:
        self._replica = replica
        self.items: list[Diagnostic] = []

    def emit(self, diagnostic: Diagnostic) -> None:
        if self._replica and not diagnostic.replica:
            diagnostic = msgspec.structs.replace(diagnostic, replica=self._replica)
        self.items.append(diagnostic)
