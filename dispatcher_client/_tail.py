"""Tailing one append-only JSONL file the way NeMo Gym writes it.

A line counts once its newline is on disk; a partial last line is held back (and the read
position stays before it) until the newline arrives. The position is a byte offset plus the
physical line number reached, the file's inode, and the last bytes consumed. The file is
*restarted* (read again from byte 0, as a new generation) when

- its inode changed (a fresh run unlinked and recreated it, or it was rewritten atomically),
- it is shorter than the position (truncated below what was consumed), or
- the bytes just before the position differ from the ones consumed (truncated and regrown
  between two polls).

- the bytes of a :class:`SentRange` (lines sent to the sidecar past the position, which it
  may hold) are no longer in the file as they were sent (cut, rewritten, or an unterminated
  line extended).

NeMo Gym's resume repair only cuts or completes an unterminated last line, which was never
consumed, so it does not restart anything (unless that line was already sent: see
:class:`SentRange`). Pure file I/O, no networking.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["FilePosition", "SentRange", "TailRead", "is_blank_line", "read_new_lines"]

_WHITESPACE = b" \t\n\r\x0b\x0c"
_FINGERPRINT = 64


def is_blank_line(data: bytes) -> bool:
    """Only ASCII whitespace: the health check skips such lines (they still take a line number)."""
    return not data.strip(_WHITESPACE)


@dataclass(frozen=True, slots=True)
class FilePosition:
    """How far one file was consumed (checkpointed after the sidecar acknowledged it)."""

    inode: int | None = None
    device: int | None = None
    offset: int = 0
    line_number: int = 0
    """Physical lines consumed (blank ones included): the next line is ``line_number + 1``."""
    tail: bytes = b""
    """The last consumed bytes (up to 64), to notice a truncate-and-regrow."""

    def as_json(self) -> dict[str, Any]:
        return {
            "inode": self.inode,
            "device": self.device,
            "offset": self.offset,
            "line_number": self.line_number,
            "tail": self.tail.hex(),
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> FilePosition:
        return cls(
            inode=body.get("inode"),
            device=body.get("device"),
            offset=int(body.get("offset", 0)),
            line_number=int(body.get("line_number", 0)),
            tail=bytes.fromhex(body.get("tail", "")),
        )


def _digest(chunks: Iterable[bytes]) -> str:
    hasher = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.hexdigest()


@dataclass(frozen=True, slots=True)
class SentRange:
    """Bytes ``[start, end)`` of a file sent to the sidecar before the position passed them.

    The follower records it (durably) before sending, so after a crash it knows which lines
    the sidecar may hold beyond its checkpoint, and whether the file still holds them.
    """

    start: int
    end: int
    digest: str
    """``blake2b`` (16 bytes, hex) of the range's bytes."""
    terminated: bool
    """The range ends with a newline; otherwise its last line was sent unterminated."""

    @classmethod
    def of(cls, start: int, lines: Iterable[bytes], partial: bytes = b"") -> SentRange:
        """The range of complete ``lines`` (without their newlines) and an unterminated ``partial``."""
        chunks = [chunk for line in lines for chunk in (line, b"\n")]
        if partial:
            chunks.append(partial)
        end = start + sum(len(chunk) for chunk in chunks)
        return cls(start, end, _digest(chunks), not partial)

    def matches(self, data: bytes) -> bool:
        """``data`` (read from ``start``) still holds the range and every line in it is whole.

        An unterminated last line must since have been completed by a newline: one still
        unterminated may yet grow into another line than the one sent, so it does not match.
        """
        size = self.end - self.start
        if len(data) < size or _digest([data[:size]]) != self.digest:
            return False
        return self.terminated or data[size : size + 1] == b"\n"

    def as_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "digest": self.digest, "terminated": self.terminated}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SentRange:
        return cls(int(body["start"]), int(body["end"]), str(body["digest"]), bool(body["terminated"]))


@dataclass(frozen=True, slots=True)
class TailRead:
    """Complete lines read past a position: ``(line_number, bytes without newline)``."""

    lines: list[tuple[int, bytes]]
    position: FilePosition
    restarted: bool
    """The file was replaced or truncated (or no longer holds the sent range): ``lines``
    start from its beginning."""
    partial: bytes
    """Bytes after the last newline read (held back, not consumed)."""
    exists: bool
    at_end: bool = False
    """The read reached the end of the file: ``partial`` is its unterminated last line."""


def read_new_lines(
    path: str, position: FilePosition, *, max_bytes: int = 8 << 20, sent: SentRange | None = None
) -> TailRead:
    """Read up to ``max_bytes`` of complete lines after ``position`` (a restart rewinds to 0).

    ``sent``, starting at the position, is checked against the very bytes this read returns
    (at least the range and one byte more are read), so no rewrite slips in between.
    """
    if sent is not None and sent.start != position.offset:
        raise ValueError(
            f"sent range [{sent.start}, {sent.end}) of {path!r} does not start at the read "
            f"position (byte {position.offset})"
        )
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return TailRead([], position, False, b"", False)
    try:
        stat = os.fstat(fd)
        restarted = _replaced(fd, stat, position)
        if restarted:
            position, sent = FilePosition(), None
        position = replace(position, inode=stat.st_ino, device=stat.st_dev)
        available = stat.st_size - position.offset
        size = min(available, max_bytes if sent is None else max(max_bytes, sent.end - sent.start + 1))
        data = os.pread(fd, size, position.offset) if size > 0 else b""
        if sent is not None and not sent.matches(data):
            restarted = True
            position = FilePosition(inode=stat.st_ino, device=stat.st_dev)
            available = stat.st_size
            data = os.pread(fd, min(available, max_bytes), 0) if available > 0 else b""
        if available <= 0:
            return TailRead([], position, restarted, b"", True, True)
    finally:
        os.close(fd)
    at_end = len(data) >= available
    end = data.rfind(b"\n")
    if end < 0:
        if not at_end:  # one line longer than max_bytes: read it whole
            return _read_long_line(path, position, restarted)
        return TailRead([], position, restarted, data, True, True)
    lines: list[tuple[int, bytes]] = []
    number = position.line_number
    start = 0
    while start <= end:
        newline = data.find(b"\n", start, end + 1)
        number += 1
        lines.append((number, data[start:newline]))
        start = newline + 1
    consumed = data[: end + 1]
    tail = (position.tail + consumed)[-_FINGERPRINT:]
    new = replace(position, offset=position.offset + end + 1, line_number=number, tail=tail)
    return TailRead(lines, new, restarted, data[end + 1 :], True, at_end)


def _read_long_line(path: str, position: FilePosition, restarted: bool) -> TailRead:
    with open(path, "rb") as handle:
        handle.seek(position.offset)
        line = handle.readline()
    if not line.endswith(b"\n"):
        return TailRead([], position, restarted, line, True, True)
    number = position.line_number + 1
    tail = (position.tail + line)[-_FINGERPRINT:]
    new = replace(position, offset=position.offset + len(line), line_number=number, tail=tail)
    return TailRead([(number, line[:-1])], new, restarted, b"", True, False)


def _replaced(fd: int, stat: os.stat_result, position: FilePosition) -> bool:
    if position.inode is None:
        return False
    if (stat.st_ino, stat.st_dev) != (position.inode, position.device):
        return True
    if stat.st_size < position.offset:
        return True
    if position.tail:
        seen = os.pread(fd, len(position.tail), position.offset - len(position.tail))
        if seen != position.tail:
            return True
    return False
