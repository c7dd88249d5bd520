"""JSONL indexing: physical lines, blank lines, line numbers and ordinals.

Files are streamed in fixed-size blocks, never loaded whole, so indexing a multi-gigabyte
run costs a few megabytes. (The batch map reads byte splits instead: :mod:`health.splits`.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["LineSlice", "is_blank", "iter_line_spans", "iter_slices", "stripped"]

_NON_WHITESPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_WHITESPACE_BYTES = frozenset(b" \t\n\r\x0b\x0c")
_OPEN_BRACE, _CLOSE_BRACE = ord("{"), ord("}")
_BLOCK_BYTES = 1 << 22


@dataclass(frozen=True, slots=True)
class LineSlice:
    """One non-blank physical line: where it is and how it is numbered."""

    path: str
    offset: int
    length: int
    """Bytes, including the trailing newline when there is one."""
    ordinal: int
    source_index: int
    line_number: int


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


def _iter_lines(path: str) -> Iterator[tuple[int, int, int, bool]]:
    """Yield ``(offset, end, next_offset, non_blank)`` per physical line; ``end`` excludes the newline."""
    buffer = bytearray(_BLOCK_BYTES)
    base = 0
    line_start = 0
    content = False
    with open(path, "rb", buffering=0) as handle:
        while True:
            size = handle.readinto(buffer)
            if not size:
                break
            pos = 0
            while pos < size:
                newline = buffer.find(b"\n", pos, size)
                end = size if newline < 0 else newline
                if not content and _NON_WHITESPACE.search(buffer, pos, end) is not None:
                    content = True
                if newline < 0:
                    break
                yield line_start, base + newline, base + newline + 1, content
                line_start = base + newline + 1
                content = False
                pos = newline + 1
            base += size
    if base > line_start:
        yield line_start, base, base, content


def iter_line_spans(path: str) -> Iterator[tuple[int, int, bool]]:
    """Yield ``(offset, length, non_blank)`` for every physical line of ``path``, in order."""
    for offset, _, next_offset, non_blank in _iter_lines(path):
        yield offset, next_offset - offset, non_blank


def iter_slices(paths: Sequence[str]) -> Iterator[LineSlice]:
    """Index ``paths`` in order into non-blank line slices (ASCII-whitespace-only lines are
    skipped but still numbered)."""
    ordinal = 0
    for source_index, path in enumerate(paths):
        for line_number, (offset, length, non_blank) in enumerate(iter_line_spans(path), start=1):
            if non_blank:
                yield LineSlice(path, offset, length, ordinal, source_index, line_number)
                ordinal += 1
