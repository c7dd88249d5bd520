"""Closed task groups on disk: one append-only file beside the snapshots, and a copy of it.

When a task closes, its reducer group (its digests as one MessagePack blob) is appended here and
the reducer keeps only the record's offset; a late repeat reads it back and re-opens the task in
memory. A record is ``<u32 little-endian length><blob>``. Nothing is ever overwritten, so every
offset a state holds stays valid however the file grows after it.

Every record is written to two files, ``closed-groups.bin`` and ``closed-groups.copy.bin``,
at the same offset. A snapshot stores the file's *mark*: its length and the CRC-32 of each
:data:`SEGMENT`-byte segment of it (the last one partial), kept as records are appended; it is
written only after both files are fsynced up to that length. A restart from a snapshot checks
the main file segment by segment (one pass, as fast as one CRC over the file); a segment that is
short or whose CRC differs is taken from the copy when the copy's segment matches the mark (and
written back), so damage to either file alone costs nothing. Only a segment damaged in both
makes the snapshot unusable (:class:`ClosedGroupsTorn`, naming the segment). Whatever was
appended after the mark is cut from both (records no loaded state refers to); a restart without
a snapshot empties both. The copy is read only where the main file fails its mark.

Read errors (``OSError``) propagate as they are: they prove nothing about the bytes.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

import structlog

__all__ = ["SEGMENT", "ClosedGroupFile", "ClosedGroupsMark", "ClosedGroupsTorn"]

_log = structlog.get_logger("sidecar.snapshot")

_HEADER = struct.Struct("<I")
SEGMENT = 1 << 20
"""Bytes per checksummed segment: damage is located (and repaired from the copy) to this size."""
_MAX_RECORD = (1 << 32) - 1
_READ_AHEAD = 2048
"""Bytes read past a record's header at once: most groups fit, larger ones take a second read."""


class ClosedGroupsTorn(Exception):
    """The files do not hold what a snapshot's mark says they held (proven damage)."""


class ClosedGroupsMark(NamedTuple):
    """The file's length and the CRC-32 of each :data:`SEGMENT` bytes of it, as a snapshot records them."""

    length: int
    crcs: tuple[int, ...]


def _segments(length: int) -> int:
    return -(-length // SEGMENT)


class ClosedGroupFile:
    """The append-only store of closed task groups of every run of one journal (and its copy)."""

    NAME = "closed-groups.bin"
    COPY = "closed-groups.copy.bin"

    def __init__(self, path: Path, copy: Path | None = None) -> None:
        self.path = path
        self.copy_path = copy if copy is not None else path.with_name(path.stem + ".copy" + path.suffix)
        self._fd = -1
        self._copy_fd = -1
        self._length = 0
        self._crcs: list[int] = []  # CRCs of the complete segments
        self._tail = 0  # CRC of the partial last segment
        #: Segments the last :meth:`restore` took from the copy (or the main file, for the copy).
        self.repaired: list[int] = []

    @classmethod
    def in_directory(cls, directory: Path) -> ClosedGroupFile:
        return cls(directory / cls.NAME, directory / cls.COPY)

    def _open(self) -> int:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            self._fd = os.open(self.path, flags, 0o644)
            self._copy_fd = os.open(self.copy_path, flags, 0o644)
        return self._fd

    # -- restart ------------------------------------------------------------------------------

    def restore(self, mark: ClosedGroupsMark | tuple[int, int] | None) -> None:
        """Make both files hold exactly what ``mark`` describes (``None``: nothing).

        Raises :class:`ClosedGroupsTorn` if a segment the mark covers matches in neither file.
        A ``(length, crc32)`` pair is the mark of snapshot format 4 (one CRC over the whole
        file, no copy yet): checked as such, then the copy is made.
        """
        fd = self._open()
        self.repaired = []
        if mark is None:
            self._cut(0)
            self._length, self._crcs, self._tail = 0, [], 0
            return
        length, crcs = mark
        if isinstance(crcs, int):
            self._restore_whole(length, crcs)
            return
        if len(crcs) != _segments(length):
            raise ClosedGroupsTorn(f"{self.path}: a mark of {length} bytes with {len(crcs)} segment CRCs")
        size = os.fstat(fd).st_size
        for index, expected in enumerate(crcs):
            start = index * SEGMENT
            want = min(SEGMENT, length - start)
            data = os.pread(fd, want, start) if start < size else b""
            if len(data) == want and zlib.crc32(data) == expected:
                continue
            self._repair(index, start, want, expected, len(data))
        copy_size = os.fstat(self._copy_fd).st_size
        if copy_size < length:  # a copy cut short (or missing): complete it from the checked main file
            self._copy_range(self._fd, self._copy_fd, copy_size, length)
        self._cut(length)
        whole = list(crcs)
        self._length = length
        self._tail = whole.pop() if length % SEGMENT else 0
        self._crcs = whole
        if self.repaired:
            _log.warning("closed groups repaired", path=str(self.path), segments=self.repaired)

    def _repair(self, index: int, start: int, want: int, expected: int, found: int) -> None:
        copy = os.pread(self._copy_fd, want, start)
        if len(copy) != want or zlib.crc32(copy) != expected:
            problem = f"{found} of {want} bytes" if found != want else "CRC-32 mismatch"
            raise ClosedGroupsTorn(
                f"{self.path.name}: segment {index} (bytes {start}..{start + want - 1}) is damaged in both "
                f"copies ({problem} here, {len(copy)} bytes in {self.copy_path.name}"
                f"{', CRC-32 mismatch' if len(copy) == want else ''})"
            )
        _pwrite_all(self._fd, copy, start)
        os.fsync(self._fd)
        self.repaired.append(index)

    def _restore_whole(self, length: int, crc: int) -> None:
        """Snapshot format 4's mark: one CRC over the main file (there is no copy to repair from)."""
        fd = self._fd
        size = os.fstat(fd).st_size
        if size < length:
            raise ClosedGroupsTorn(f"{self.path}: {size} bytes, the snapshot refers to {length}")
        seen, crcs = 0, []
        for start in range(0, length, SEGMENT):
            data = os.pread(fd, min(SEGMENT, length - start), start)
            seen = zlib.crc32(data, seen)
            crcs.append(zlib.crc32(data))
        if seen != crc:
            raise ClosedGroupsTorn(
                f"{self.path}: CRC-32 {seen:#010x} of {length} bytes, the snapshot says {crc:#010x}"
            )
        os.ftruncate(self._copy_fd, 0)
        self._copy_range(fd, self._copy_fd, 0, length)
        self._cut(length)
        self._length = length
        self._tail = crcs.pop() if length % SEGMENT else 0
        self._crcs = crcs

    @staticmethod
    def _copy_range(source: int, target: int, start: int, end: int) -> None:
        for offset in range(start, end, SEGMENT):
            _pwrite_all(target, os.pread(source, min(SEGMENT, end - offset), offset), offset)
        os.fsync(target)

    def _cut(self, length: int) -> None:
        for fd in (self._fd, self._copy_fd):
            if os.fstat(fd).st_size > length:
                os.ftruncate(fd, length)

    # -- the live service ---------------------------------------------------------------------

    def put(self, blob: bytes) -> int:
        """Append one group to both files; returns its offset (the reducer's reference to it)."""
        if len(blob) > _MAX_RECORD:
            raise ValueError(
                f"a closed group of {len(blob)} bytes exceeds the {_MAX_RECORD}-byte record limit"
            )
        fd = self._open()
        record = _HEADER.pack(len(blob)) + blob
        offset = self._length
        _pwrite_all(fd, record, offset)
        _pwrite_all(self._copy_fd, record, offset)
        self._length = offset + len(record)
        room = SEGMENT - offset % SEGMENT
        if len(record) < room:
            self._tail = zlib.crc32(record, self._tail)
            return offset
        view = memoryview(record)
        self._crcs.append(zlib.crc32(view[:room], self._tail))
        position = room
        while len(record) - position >= SEGMENT:
            self._crcs.append(zlib.crc32(view[position : position + SEGMENT]))
            position += SEGMENT
        self._tail = zlib.crc32(view[position:])
        return offset

    def get(self, offset: int) -> bytes:
        """The group appended at ``offset`` (one read for a group of up to ``_READ_AHEAD`` bytes);
        a record whose header points past the file's end is read from the copy."""
        blob = self._read(self._open(), offset)
        if blob is None:
            blob = self._read(self._copy_fd, offset)
        if blob is None:
            raise ClosedGroupsTorn(f"{self.path}: record at offset {offset} is torn in both copies")
        return blob

    def _read(self, fd: int, offset: int) -> bytes | None:
        if not 0 <= offset < self._length:
            raise ClosedGroupsTorn(f"{self.path}: no record at offset {offset} (file length {self._length})")
        data = os.pread(fd, _HEADER.size + _READ_AHEAD, offset)
        if len(data) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(data)
        if offset + _HEADER.size + size > self._length:
            return None
        blob = data[_HEADER.size : _HEADER.size + size]
        if len(blob) < size:
            blob += os.pread(fd, size - len(blob), offset + _HEADER.size + len(blob))
        return blob if len(blob) == size else None

    def mark(self) -> ClosedGroupsMark:
        crcs = (*self._crcs, self._tail) if self._length % SEGMENT else tuple(self._crcs)
        return ClosedGroupsMark(self._length, crcs)

    def sync(self) -> None:
        """Make every record appended so far durable (before a snapshot that refers to them)."""
        if self._fd >= 0:
            os.fsync(self._fd)
            os.fsync(self._copy_fd)

    def close(self) -> None:
        for fd in (self._fd, self._copy_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._copy_fd = -1


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    written = os.pwrite(fd, data, offset)
    while written < len(data):
        written += os.pwrite(fd, data[written:], offset + written)
