"""The diagnostic sink's lines: a UTC timestamp and a level first, then the fixed fields; and
library loggers (asyncpg, trio-asyncio, hypercorn) routed into it as codes, text dropped."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging

import pytest

from qlsched.core.diagnostics import Diagnostic
from qlsched.sinks import LIBRARY_LOGGERS, StreamSink, route_library_logs


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    return [
        json.loads(line, object_pairs_hook=no_duplicates) for line in stream.getvalue().splitlines()
    ]


def test_each_line_starts_with_a_utc_timestamp_and_a_level() -> None:
    """Rule: every line carries ``ts`` (UTC, ISO 8601 with Z, millisecond precision) and
    ``level`` (error for a failed step, warning otherwise), before the fixed fields."""
    stream = io.StringIO()
    sink = StreamSink(stream, replica="r1")
    before = dt.datetime.now(dt.UTC)
    sink.emit(Diagnostic(code="round_failed", exception="OSError", count=2))
    sink.emit(Diagnostic(code="admit_batch_fallback", count=3))
    after = dt.datetime.now(dt.UTC)
    first, second = lines(stream)
    assert list(first)[:3] == ["ts", "level", "code"]
    assert first["level"] == "error"
    assert second["level"] == "warning"
    ts = str(first["ts"])
    assert ts.endswith("Z")
    stamp = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    assert before - dt.timedelta(milliseconds=1) <= stamp <= after
    assert first["replica"] == "r1"


@pytest.mark.parametrize("name", [*LIBRARY_LOGGERS, "asyncpg.pool"])
def test_library_records_become_codes_without_their_text(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: inside ``route_library_logs`` a library's warning or error (with a traceback)
    becomes one ``library_log`` line naming the logger, level and exception class; its
    message and traceback reach neither the sink nor stderr. Outside, the logger is as
    it was."""
    stream = io.StringIO()
    sink = StreamSink(stream)
    logger = logging.getLogger(name)
    propagate = logger.propagate
    with route_library_logs(sink):
        try:
            raise ConnectionResetError("password=hunter2")
        except ConnectionResetError:
            logger.exception("connection lost: %s", "hunter2")
        logger.warning("something about row data hunter2")
        logger.info("chatter")
    (error, warning) = lines(stream)
    assert error == {
        "ts": error["ts"],
        "level": "error",
        "code": "library_log",
        "exception": "ConnectionResetError",
        "logger": name,
    }
    assert warning["level"] == "warning"
    assert "hunter2" not in stream.getvalue()
    captured = capsys.readouterr()
    assert captured.err == ""
    assert logger.propagate == propagate
    assert not any(type(h).__name__ == "_LibraryHandler" for h in logger.handlers)
