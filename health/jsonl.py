"""JSONL indexing (spec §2.1): physical lines, blank lines, line numbers and ordinals.

Files are streamed in fixed-size blocks, never loaded whole, so indexing a multi-gigabyte
run costs a few megabytes. The batch runner does not ship one slice per line to its
workers: :func:`plan_ranges` groups consecutive lines into large contiguous byte ranges,
and each worker re-opens the file, reads its range and re-splits it with
:func:`iter_range_lines`, which reproduces the same line numbers and ordinals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "ByteRange",
    "LineSlice",
    "is_blank",
    "iter_line_spans",
    "iter_range_lines",
    "iter_slices",
    "plan_ranges",
    "read_range",
]

_NON_WHITESPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")
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


def is_blank(data: bytes, start: int = 0, end: int | None = None) -> bool:
    """True if ``data[start:end]`` holds only ASCII whitespace (no copy is made)."""
    return _NON_WHITESPACE.search(data, start, len(data) if end is None else end) is None


def iter_line_spans(path: str) -> Iterator[tuple[int, int, bool]]:
    """Yield ``(offset, length, non_blank)`` for every physical line of ``path``, in order."""
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
                yield line_start, base + newline + 1 - line_start, content
                line_start = base + newline + 1
                content = False
                pos = newline + 1
            base += size
    if base > line_start:
        yield line_start, base - line_start, content


def iter_slices(paths: Sequence[str]) -> Iterator[LineSlice]:
    """Index ``paths`` in order into non-blank line slices (spec §2.1)."""
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
        start = 0
        length = 0
        first_line = 1
        first_ordinal = ordinal
        records = 0
        for line_number, (offset, span, non_blank) in enumerate(iter_line_spans(path), start=1):
            if length == 0:
                start, first_line, first_ordinal = offset, line_number, ordinal
            length += span
            if non_blank:
                records += 1
                ordinal += 1
            if length >= target_bytes or records >= max_records:
                if records:
                    yield ByteRange(path, source_index, start, length, first_line, first_ordinal, records)
                length = 0
                records = 0
        if length and records:
            yield ByteRange(path, source_index, start, length, first_line, first_ordinal, records)


def read_range(byte_range: ByteRange) -> bytes:
    """Re-open the range's file and read exactly its bytes."""
    with open(byte_range.path, "rb", buffering=0) as handle:
        handle.seek(byte_range.offset)
        data = handle.read(byte_range.length)
    if len(data) != byte_range.length:
        raise OSError(
            f"{byte_range.path!r} changed while being checked: expected {byte_range.length} bytes "
            f"at offset {byte_range.offset}, read {len(data)}"
        )
    return data


def iter_range_lines(data: bytes, byte_range: ByteRange) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(line, line_number, ordinal)`` for the non-blank lines of a range's bytes.

    ``line`` excludes the newline; numbering continues from the range's first line.
    """
    line_number = byte_range.first_line_number
    ordinal = byte_range.first_ordinal
    pos = 0
    size = len(data)
    while pos < size:
        newline = data.find(b"\n", pos)
        end = size if newline < 0 else newline
        if _NON_WHITESPACE.search(data, pos, end) is not None:
            yield data[pos:end], line_number, ordinal
            ordinal += 1
        line_number += 1
        pos = end + 1
