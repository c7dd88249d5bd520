"""Is a byte string JSON exactly as orjson reads it, with the values msgspec decodes?

msgspec (the fast paths) accepts some of what orjson (the full path) refuses, so simdjson vets
a document first: its acceptance is a subset of orjson's with the same values (a leading BOM
is refused here). Depth is checked by wrapping the document in ``1024 - max_depth`` arrays, so
a caller must decode exactly one value afterwards. A refusal is safe: the full path decides.
"""

from __future__ import annotations

import threading
from typing import Final

import simdjson

__all__ = ["MAX_DEPTH", "may_nest_deeper", "vet"]

MAX_DEPTH: Final = 1024
"""orjson's nesting limit: a deeper document is refused whatever ``max_depth`` allows."""

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


def _parse_wrapped(data: bytes | bytearray | memoryview, max_depth: int) -> None:
    """simdjson's parse of ``data`` inside ``1024 - max_depth`` arrays (raises its refusals)."""
    wrap = MAX_DEPTH - min(max_depth, MAX_DEPTH)
    _parser().parse(b"".join((b"[" * wrap, data, b"]" * wrap)))  # the proxy is dropped at once


def vet(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> bool:
    """True only if ``orjson.loads(data)`` succeeds with the values msgspec decodes and
    ``data`` nests at most ``max_depth`` containers (``{}`` is 1 deep; see the module notes
    for the two edge cases; past 1024 acts as 1024)."""
    if max_depth < 0:
        raise ValueError(f"vet() max_depth must be >= 0, got {max_depth}")
    if len(data) > _MAX_BYTES or bytes(data[:3]) == _BOM:
        return False
    try:
        _parse_wrapped(data, max_depth)
    except Exception:  # any refusal (ValueError, RuntimeError, UnicodeDecodeError ...)
        return False
    return True


def may_nest_deeper(data: bytes | bytearray | memoryview, max_depth: int) -> bool:
    """False where JSON ``data`` surely nests at most ``max_depth`` containers; True where
    simdjson refuses it for its depth (a value inside the deepest container counts as one more
    level, so a True needs an exact count) or it is too long to ask."""
    if len(data) > _MAX_BYTES:
        return True
    try:
        _parse_wrapped(data, max_depth)
    except RuntimeError as exc:
        return "DEPTH_ERROR" in str(exc)
    except (ValueError, UnicodeDecodeError):  # not JSON as simdjson reads it: not a depth answer
        return False
    return False
