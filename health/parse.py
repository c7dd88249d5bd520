"""Reading one JSONL line into a record, with orjson semantics (what orjson refuses is unreadable).

A line is unreadable when it is not JSON (``"JSONDecodeError"``) or is JSON but not an
object (``"ValueError"``); the error name is what the ``record_unreadable`` finding reports.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["JSON_DECODE_ERROR", "NOT_AN_OBJECT_ERROR", "parse_line"]

JSON_DECODE_ERROR = "JSONDecodeError"
NOT_AN_OBJECT_ERROR = "ValueError"


def parse_line(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)`` for a JSON object line, else ``(None, error_name)``.

    ``bytes.strip()`` trims exactly the ASCII whitespace set of the line splitter. orjson
    rejects NaN/Infinity, invalid UTF-8, lone surrogates, a BOM, overflowing floats and
    nesting deeper than 1024, and turns integers beyond 64 bits into floats.
    """
    try:
        value = orjson.loads(data.strip())
    except orjson.JSONDecodeError:
        return None, JSON_DECODE_ERROR
    if not isinstance(value, dict):
        return None, NOT_AN_OBJECT_ERROR
    return value, None
