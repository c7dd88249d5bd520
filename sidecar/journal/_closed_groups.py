"""Closed task groups on disk: one append-only file beside the snapshots.

When a task closes, its reducer group (its digests as one MessagePack blob) is appended here and
the reducer keeps only the record's offset; a late repeat reads it back and re-opens the task in
memory. A record is ``<u32 little-endian length><blob>``. Nothing is ever overwritten, so every
offset a state holds stays valid however the file grows after it.

A snapshot stores the file's *mark* (its length and the CRC-32 of those bytes, kept as records
are appended) and is written only after the file is fsynced up to that length. A restart from a
snapshot checks the mark (a file shorter than it or whose bytes do not match makes the snapshot
unusable, like a torn snapshot: the next older one is tried) and truncates what was appended after
it (records no loaded state refers to); a restart without a snapshot empties the file.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

__all__ = ["ClosedGroupFile", "ClosedGroupsMark", "ClosedGroupsTorn"]

_HEADER = struct.Struct("<I")
_CRC_CHUNK = 1 << 20
_MAX_RECORD = (1 << 32) - 1
_READ_AHEAD = 2048
"""Bytes read past a record's header at once: most groups fit, larger ones take a second read."""


class ClosedGroupsTorn(Exception):
    """The file does not hold what a snapshot's mark says it held."""


class ClosedGroupsMark(NamedTuple):
    """The file's length and the CRC-32 of those bytes, as a snapshot records them."""

    length: int
    crc32: int


class ClosedGroupFile:
    """The append-only store of closed task groups of every run of one journal."""

    NAME = "closed-groups.bin"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._length = 0
        self._crc = 0

    @classmethod
    def in_directory(cls, directory: Path) -> ClosedGroupFile:
        return cls(directory / cls.NAME)

    def _open(self) -> int:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        return self._fd

    def restore(self, mark: ClosedGroupsMark | None) -> None:
        """Make the file hold exactly what ``mark`` describes (``None``: nothing); raises
        :class:`ClosedGroupsTorn` if it is shorter than the mark or its bytes differ."""
        fd = self._open()
        length, crc = mark if mark is not None else (0, 0)
        size = os.fstat(fd).st_size
        if size < length:
            raise ClosedGroupsTorn(f"{self.path}: {size} bytes, the snapshot refers to {length}")
        seen, offset = 0, 0
        while offset < length:
            chunk = os.pread(fd, min(_CRC_CHUNK, length - offset), offset)
            if not chunk:
                raise ClosedGroupsTorn(f"{self.path}: unreadable at byte {offset}")
            seen = zlib.crc32(chunk, seen)
            offset += len(chunk)
        if seen != crc:
            raise ClosedGroupsTorn(
                f"{self.path}: CRC-32 {seen:#010x} of {length} bytes, the snapshot says {crc:#010x}"
            )
        if size > length:
            os.ftruncate(fd, length)
        self._length, self._crc = length, crc

    def put(self, blob: bytes) -> int:
        """Append one group; returns its offset (the reducer's reference to it)."""
        if len(blob) > _MAX_RECORD:
            raise ValueError(
                f"a closed group of {len(blob)} bytes exceeds the {_MAX_RECORD}-byte record limit"
            )
        fd = self._open()
        record = _HEADER.pack(len(blob)) + blob
        offset = self._length
        written = os.pwrite(fd, record, offset)
        while written < len(record):
            written += os.pwrite(fd, record[written:], offset + written)
        self._length = offset + len(record)
        self._crc = zlib.crc32(record, self._crc)
        return offset

    def get(self, offset: int) -> bytes:
        """The group appended at ``offset`` (one read for a group of up to ``_READ_AHEAD`` bytes)."""
        fd = self._open()
        if not 0 <= offset < self._length:
            raise ClosedGroupsTorn(f"{self.path}: no record at offset {offset} (file length {self._length})")
        data = os.pread(fd, _HEADER.size + _READ_AHEAD, offset)
        if len(data) < _HEADER.size:
            raise ClosedGroupsTorn(f"{self.path}: no record at offset {offset} (file length {self._length})")
        (size,) = _HEADER.unpack_from(data)
        blob = data[_HEADER.size : _HEADER.size + size]
        if len(blob) < size:
            blob += os.pread(fd, size - len(blob), offset + _HEADER.size + len(blob))
        if len(blob) != size:
            raise ClosedGroupsTorn(f"{self.path}: record at offset {offset} is torn")
        return blob

    def mark(self) -> ClosedGroupsMark:
        return ClosedGroupsMark(self._length, self._crc)

    def sync(self) -> None:
        """Make every record appended so far durable (before a snapshot that refers to them)."""
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
