"""Is a byte string JSON exactly as orjson reads it, with the values msgspec decodes?

The fast paths decode lines and request bodies with msgspec, which checks syntax but not all
of what orjson (the full path) refuses: invalid UTF-8 inside strings, lone surrogate escapes,
numbers that overflow to infinity; and orjson reads integers past 64 bits as floats where
msgspec keeps them exact. So a document is vetted first, by simdjson, which reads it at
several GB/s without building a value. Its acceptance is a subset of orjson's with the same
values (it refuses integers outside ``[-2**63, 2**64 - 1]``), except a leading byte-order
mark, which it skips and orjson refuses: that is refused here.

Depth is checked by wrapping the document in ``1024 - max_depth`` arrays (simdjson's limit
is orjson's, 1024); simdjson counts a scalar as a level, so a document exactly ``max_depth``
deep with a scalar at its deepest level is refused, and the wrapping lets a document close it
and open another (``1],[2``): a caller decodes exactly one value afterwards (a msgspec decode
does). A refusal is always safe: the caller takes orjson's full path.
"""

from __future__ import annotations

import threading
from typing import Final

import simdjson

__all__ = ["MAX_DEPTH", "EventRows", "vet", "vet_event_rows"]

MAX_DEPTH: Final = 1024
"""orjson's nesting limit: a deeper document is refused whatever ``max_depth`` allows."""

EventRows = tuple[bytes, list[tuple[int, int]]]
"""An ingest body without its events' rows, and each row's span (never produced here)."""

_MAX_BYTES: Final = 256 << 20
"""Longer documents are refused: a simdjson parser keeps a buffer as large as its largest input."""
_BOM: Final = b"\xef\xbb\xbf"
_local = threading.local()


def _parser() -> simdjson.Parser:
    """simdjson parsers are not thread-safe and keep their buffers: one per thread."""
    parser: simdjson.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


def vet(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> bool:
    """True only if ``orjson.loads(data)`` succeeds with the values msgspec decodes and
    ``data`` nests at most ``max_depth`` containers (``{}`` is 1 deep; see the module notes
    for the two edge cases; past 1024 acts as 1024)."""
    if max_depth < 0:
        raise ValueError(f"vet() max_depth must be >= 0, got {max_depth}")
    if len(data) > _MAX_BYTES or bytes(data[:3]) == _BOM:
        return False
    wrap = MAX_DEPTH - min(max_depth, MAX_DEPTH)
    try:
        _parser().parse(b"".join((b"[" * wrap, data, b"]" * wrap)))  # the proxy is dropped at once
    except Exception:  # any refusal (ValueError, RuntimeError, UnicodeDecodeError ...)
        return False
    return True


def vet_event_rows(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> EventRows | bool:
    """:func:`vet`; the caller decodes a vetted body whole (no row spans are found here)."""
    return vet(data, max_depth)
