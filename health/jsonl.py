"""JSONL lines: blank tests and stripping without copies (the lines come from :mod:`health.splits`)."""

from __future__ import annotations

import re

__all__ = ["is_blank", "stripped"]

_NON_WHITESPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_WHITESPACE_BYTES = frozenset(b" \t\n\r\x0b\x0c")
_OPEN_BRACE, _CLOSE_BRACE = ord("{"), ord("}")


def is_blank(data: bytes | memoryview, start: int = 0, end: int | None = None) -> bool:
    """True if ``data[start:end]`` holds only ASCII whitespace (no copy is made)."""
    stop = len(data) if end is None else end
    if start < stop and data[start] not in _WHITESPACE_BYTES:  # a record line: its "{" decides
        return False
    return _NON_WHITESPACE.search(data, start, stop) is None


def stripped(data: bytes | memoryview) -> bytes | memoryview:
    """``data`` without leading and trailing ASCII whitespace, as ``bytes.strip()`` trims it; a
    memoryview stays a view (no copy), and a line that starts with ``{`` and ends with ``}``
    (every record line) is returned as it is."""
    if type(data) is bytes:
        return data.strip()
    if len(data) and data[0] == _OPEN_BRACE and data[-1] == _CLOSE_BRACE:
        return data
    first = _NON_WHITESPACE.search(data)
    if first is None:
        return data[:0]
    end = len(data)
    while data[end - 1] in _WHITESPACE_BYTES:
        end -= 1
    return data[first.start() : end]
