"""Tailing one append-only JSONL file the way NeMo Gym writes it, in bounded memory (a line over
the cap is scanned in chunks, never held); a replaced or rewritten file is read again from byte 0.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["FilePosition", "Oversize", "SentRange", "TailRead", "is_blank_line", "read_new_lines"]

_WHITESPACE = b" \t\n\r\x0b\x0c"
_FINGERPRINT = 64
_CHUNK = 1 << 20


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
        return {**asdict(self), "tail": self.tail.hex()}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> FilePosition:
        return cls(body.get("inode"), body.get("device"), int(body.get("offset", 0)),
                   int(body.get("line_number", 0)), bytes.fromhex(body.get("tail", "")))


def _hasher() -> Any:
    return hashlib.blake2b(digest_size=16)


@dataclass(frozen=True, slots=True)
class SentRange:
    """Bytes ``[start, end)`` of a file sent to the sidecar before the position passed them, recorded
    durably before sending: after a crash it says whether the file still holds what was sent."""

    start: int
    end: int
    digest: str
    """``blake2b`` (16 bytes, hex) of the range's bytes."""
    terminated: bool
    """The range ends with a newline; otherwise its last line was sent unterminated."""

    @classmethod
    def of(cls, start: int, lines: Iterable[bytes], partial: bytes = b"") -> SentRange:
        """The range of complete ``lines`` (without their newlines) and an unterminated ``partial``."""
        hasher, end = _hasher(), start + len(partial)
        for line in lines:
            hasher.update(line)
            hasher.update(b"\n")
            end += len(line) + 1
        hasher.update(partial)
        return cls(start, end, hasher.hexdigest(), not partial)

    def matches(self, fd: int) -> bool:
        """The file still holds the range and every line in it is whole (an unterminated last line
        must since have been completed by a newline: it may yet grow into another line)."""
        hasher, offset = _hasher(), self.start
        while offset < self.end:
            chunk = os.pread(fd, min(_CHUNK, self.end - offset), offset)
            if not chunk:
                return False
            hasher.update(chunk)
            offset += len(chunk)
        if hasher.hexdigest() != self.digest:
            return False
        return self.terminated or os.pread(fd, 1, self.end) == b"\n"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SentRange:
        return cls(int(body["start"]), int(body["end"]), str(body["digest"]), bool(body["terminated"]))


@dataclass(frozen=True, slots=True)
class Oversize:
    """A line over the cap, scanned but not read: its number, size (without newline) and range."""

    line_number: int
    size: int
    sent: SentRange


@dataclass(frozen=True, slots=True)
class TailRead:
    """Complete lines read past a position: ``(line_number, bytes without newline)``."""

    lines: list[tuple[int, bytes]]
    position: FilePosition
    restarted: bool
    """The file was replaced or truncated (or lost the sent range): ``lines`` start from byte 0."""
    partial: bytes
    """Bytes after the last newline read (held back, not consumed)."""
    at_end: bool = False
    """The read reached the end of the file: ``partial`` is its unterminated last line."""
    oversize: Oversize | None = None
    """This read is one line over the cap (``lines`` is empty)."""


def read_new_lines(path: str, position: FilePosition, *, max_bytes: int = 8 << 20,
                   max_line_bytes: int = 64 << 20, sent: SentRange | None = None) -> TailRead:
    """Up to ``max_bytes`` of complete lines after ``position`` (a restart rewinds to 0); a line over
    ``max_line_bytes`` comes as :class:`Oversize`. ``sent`` is checked against the file first."""
    if sent is not None and sent.start != position.offset:
        raise ValueError(f"sent range [{sent.start}, {sent.end}) of {path!r} does not start at the read "
                         f"position (byte {position.offset})")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return TailRead([], position, False, b"")
    try:
        stat = os.fstat(fd)
        restarted = _replaced(fd, stat, position) or (sent is not None and not sent.matches(fd))
        if restarted:
            position = FilePosition()
        position = replace(position, inode=stat.st_ino, device=stat.st_dev)
        available = stat.st_size - position.offset
        if sent is not None and not restarted and sent.end - sent.start <= max_line_bytes:
            max_bytes = max(max_bytes, sent.end - sent.start + 1)  # the sent lines come back in one read
        data = os.pread(fd, min(available, max_bytes), position.offset) if available > 0 else b""
        end = data.rfind(b"\n")
        if end < 0 and len(data) < available:  # one line longer than max_bytes
            return _long_line(fd, position, restarted, max_line_bytes, stat.st_size)
    finally:
        os.close(fd)
    if end < 0:
        return TailRead([], position, restarted, data, True)
    lines: list[tuple[int, bytes]] = []
    number, start = position.line_number, 0
    while start <= end:
        newline = data.find(b"\n", start, end + 1)
        number += 1
        lines.append((number, data[start:newline]))
        start = newline + 1
    return TailRead(lines, _past(position, data[: end + 1], number), restarted, data[end + 1 :],
                    len(data) >= available)


def _past(position: FilePosition, consumed: bytes, number: int, size: int | None = None) -> FilePosition:
    tail = (position.tail + consumed)[-_FINGERPRINT:]
    offset = position.offset + (len(consumed) if size is None else size)
    return replace(position, offset=offset, line_number=number, tail=tail)


def _long_line(fd: int, position: FilePosition, restarted: bool, cap: int, file_size: int) -> TailRead:
    """The line at ``position``: scanned for its newline in chunks (hashed, never held), then read
    whole when it is at most ``cap`` bytes."""
    hasher, offset, last = _hasher(), position.offset, b""
    size = terminated = 0
    while offset < file_size:
        chunk = os.pread(fd, min(_CHUNK, file_size - offset), offset)
        if not chunk:
            break
        newline = chunk.find(b"\n")
        piece = chunk if newline < 0 else chunk[: newline + 1]
        hasher.update(piece)
        last = (last + piece)[-_FINGERPRINT:]
        offset += len(piece)
        if newline >= 0:
            terminated = 1
            break
    size = offset - position.offset - terminated
    number = position.line_number + 1
    if size <= cap:
        line = os.pread(fd, size, position.offset)
        if not terminated:
            return TailRead([], position, restarted, line, True)
        return TailRead([(number, line)], _past(position, line + b"\n", number), restarted, b"", False)
    sent = SentRange(position.offset, offset, hasher.hexdigest(), bool(terminated))
    oversize = Oversize(number, size, sent)
    if not terminated:
        return TailRead([], position, restarted, b"", True, oversize)
    return TailRead([], _past(position, last, number, size + 1), restarted, b"", False, oversize)


def _replaced(fd: int, stat: os.stat_result, position: FilePosition) -> bool:
    if position.inode is None:
        return False
    if (stat.st_ino, stat.st_dev) != (position.inode, position.device) or stat.st_size < position.offset:
        return True
    if position.tail:
        return os.pread(fd, len(position.tail), position.offset - len(position.tail)) != position.tail
    return False
