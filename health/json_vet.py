"""Is a byte string JSON exactly as orjson reads it, with the values msgspec decodes?

The live service decodes request bodies with msgspec, which checks syntax but not all of what
orjson (the full path) refuses, and reads integers past 64 bits as integers where orjson
reads floats. :func:`vet` says True only where both agree: orjson parses ``data``, no run of
19 or more digits appears in it (so every integer fits 64 bits), and it nests at most
``max_depth`` containers. A refusal is always safe: the caller takes orjson's full path.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

__all__ = ["MAX_DEPTH", "EventRows", "vet", "vet_event_rows"]

MAX_DEPTH: Final = 1024
"""orjson's nesting limit: a deeper document is refused whatever ``max_depth`` allows."""

EventRows = tuple[bytes, list[tuple[int, int]]]
"""An ingest body without its events' rows, and each row's span (never produced here)."""

_LONG_DIGITS: Final = re.compile(rb"\d{19}")


def _depth(value: Any) -> int:
    """Containers nested in ``value`` (``{}`` is 1 deep, a scalar 0)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def vet(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> bool:
    """True only if ``orjson.loads(data)`` succeeds with the values msgspec decodes and
    ``data`` nests at most ``max_depth`` containers (past 1024 acts as 1024)."""
    if max_depth < 0:
        raise ValueError(f"vet() max_depth must be >= 0, got {max_depth}")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return _LONG_DIGITS.search(data) is None and _depth(value) <= min(max_depth, MAX_DEPTH)


def vet_event_rows(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> EventRows | bool:
    """:func:`vet`; the caller decodes a vetted body whole (no row spans are found here)."""
    return vet(data, max_depth)
