"""JSONL indexing: physical lines, blank lines, line numbers and ordinals.

Files are streamed in fixed-size blocks, never loaded whole, so indexing a multi-gigabyte
run costs a few megabytes. The batch runner does not ship one slice per line to its
workers: :func:`plan_ranges` groups consecutive lines into large contiguous byte ranges,
each listing where its non-blank lines are (the index finds them anyway), and a worker
reads exactly those lines with one ``pread`` each (:func:`iter_range_records`). Reading
the whole range and slicing it copied every byte twice and faulted in a fresh
multi-megabyte buffer per range; a ``pread`` per line copies each byte once and never
reads blank lines.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

__all__ = [
    "ByteRange",
    "LineSlice",
    "is_blank",
    "iter_line_spans",
    "iter_range_records",
    "iter_slices",
    "plan_ranges",
    "stripped",
]

_NON_WHITESPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
_WHITESPACE_BYTES = frozenset(b" \t\n\r\x0b\x0c")
_OPEN_BRACE, _CLOSE_BRACE = ord("{"), ord("}")
_BLOCK_BYTES = 1 << 22
_HAS_PREAD = hasattr(os, "pread")


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


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Consecutive whole lines of one file, handed to one worker as a unit."""

    path: str
    source_index: int
    offset: int
    length: int
    first_line_number: int
    first_ordinal: int
    records: int
    """Non-blank lines inside the range."""
    lines: tuple[tuple[int, int, int], ...]
    """``(offset, length without the newline, line number)`` of each non-blank line, in order."""


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


def plan_ranges(paths: Sequence[str], *, target_bytes: int, max_records: int) -> Iterator[ByteRange]:
    """Group the lines of ``paths`` into ranges of about ``target_bytes`` / ``max_records``.

    A range never spans two files, always ends at a line boundary and holds at least one
    non-blank line; stretches of blank lines alone produce no range.
    """
    ordinal = 0
    for source_index, path in enumerate(paths):
        start = -1  # offset of the range being built; -1 between ranges
        first_line = first_ordinal = stop = 0
        lines: list[tuple[int, int, int]] = []
        for line_number, (offset, end, stop, non_blank) in enumerate(_iter_lines(path), start=1):
            if start < 0:
                start, first_line, first_ordinal = offset, line_number, ordinal
            if non_blank:
                lines.append((offset, end - offset, line_number))
                ordinal += 1
            if stop - start >= target_bytes or len(lines) >= max_records:
                if lines:
                    yield ByteRange(
                        path,
                        source_index,
                        start,
                        stop - start,
                        first_line,
                        first_ordinal,
                        len(lines),
                        tuple(lines),
                    )
                    lines = []
                start = -1
        if lines:
            yield ByteRange(
                path, source_index, start, stop - start, first_line, first_ordinal, len(lines), tuple(lines)
            )


def _changed(path: str, offset: int, expected: int, got: int) -> OSError:
    return OSError(
        f"{path!r} changed while being checked: expected {expected} bytes at offset {offset}, read {got}"
    )


def _pread(handle: BinaryIO, length: int, offset: int) -> bytes:
    """``length`` bytes at ``offset``, without moving the file position where ``os.pread`` exists."""
    if _HAS_PREAD:
        return os.pread(handle.fileno(), length, offset)
    handle.seek(offset)  # Windows
    return handle.read(length)


def iter_range_records(byte_range: ByteRange) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(line, line_number, ordinal)`` for the range's non-blank lines, read one by one.

    ``line`` excludes the newline. A file shorter than the range, or a line that reads short,
    raises ``OSError`` ("changed while being checked").
    """
    path = byte_range.path
    with open(path, "rb", buffering=0) as handle:
        available = os.fstat(handle.fileno()).st_size - byte_range.offset
        if available < byte_range.length:
            raise _changed(path, byte_range.offset, byte_range.length, max(0, available))
        ordinal = byte_range.first_ordinal
        for offset, length, line_number in byte_range.lines:
            line = _pread(handle, length, offset)
            if len(line) != length:
                raise _changed(path, offset, length, len(line))
            yield line, line_number, ordinal
            ordinal += 1
