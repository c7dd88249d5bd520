"""One log channel: JSON lines off a terminal, human-readable on one; stdlib records included."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest
import structlog

from sidecar.http.logging import configure_logging


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


class TestConfigureLogging:
    def test_json_lines_when_not_a_terminal(self) -> None:
        stream = io.StringIO()
        configure_logging("info", stream=stream)
        structlog.get_logger("sidecar.test").info("hello", run_id="r1", count=3)
        logging.getLogger("uvicorn.error").warning("from the stdlib")
        structlog.get_logger("sidecar.test").debug("filtered out")
        lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
        assert [line["event"] for line in lines] == ["hello", "from the stdlib"]
        assert lines[0]["run_id"] == "r1" and lines[0]["level"] == "info" and "timestamp" in lines[0]
        assert lines[1]["logger"] == "uvicorn.error" and lines[1]["level"] == "warning"

    def test_human_output_on_a_terminal(self) -> None:
        stream = _Tty()
        configure_logging("info", stream=stream)
        structlog.get_logger("sidecar.test").info("hello", run_id="r1")
        text = stream.getvalue()
        assert "hello" in text and "run_id" in text
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(text.splitlines()[0])
