"""The on-disk overflow of undelivered events: one append-only JSONL file per run.

Events are appended as encoded JSON lines (orjson never writes a raw newline inside one)
and read back in order from a read position that is stored in a small side file after each
delivered batch. The file is truncated to zero once everything in it is delivered. A spool
left behind by a process that died is picked up by the next client of the same run and
delivered again from the stored position: the sidecar's idempotency keys turn anything sent
twice into a duplicate.

Durability (``ClientConfig.fsync``): appends go through ``write(2)``, so a crash of the
dispatcher process loses nothing that was spooled; ``always`` also fsyncs every append,
``interval`` fsyncs at most every ``fsync_interval_s`` (from the sender), ``never`` leaves
it to the OS. The read position is written without fsync: after a host crash a few
delivered events may be sent again, never fewer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["Spool"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class Spool:
    """Append-only FIFO of encoded events on disk (single-threaded: the client's loop)."""

    def __init__(self, directory: Path, run_id: str, *, max_bytes: int, fsync_always: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        stem = _SAFE.sub("_", run_id)
        self.path = directory / f"spool-{stem}.jsonl"
        self._pos_path = directory / f"spool-{stem}.pos"
        self.max_bytes = max_bytes
        self._fsync_always = fsync_always
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._read = min(self._stored_position(), self._size)
        self._dirty = False

    def _stored_position(self) -> int:
        try:
            text = self._pos_path.read_text().strip()
        except FileNotFoundError:
            return 0
        except OSError:
            return 0
        return int(text) if text.isdigit() else 0

    @property
    def pending_bytes(self) -> int:
        return self._size - self._read

    @property
    def pending(self) -> bool:
        return self._size > self._read

    def fits(self, size: int) -> bool:
        return self.pending_bytes + size <= self.max_bytes

    def append(self, lines: list[bytes]) -> None:
        """Append encoded events (each without newline); raises ``OSError`` if the disk refuses."""
        data = b"".join(line + b"\n" for line in lines)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)
        if self._fsync_always:
            os.fsync(self._fd)
        else:
            self._dirty = True

    def sync(self) -> None:
        """fsync pending appends (called from a worker thread by the ``interval`` policy)."""
        if self._dirty:
            self._dirty = False
            os.fsync(self._fd)

    def peek(self, max_events: int, max_bytes: int) -> tuple[list[bytes], int]:
        """Up to ``max_events`` / ``max_bytes`` next events (at least one) and the position after them."""
        if not self.pending:
            return [], self._read
        budget = max(max_bytes, 1)
        chunk = os.pread(self._fd, min(self.pending_bytes, budget + 1), self._read)
        events: list[bytes] = []
        pos = 0
        while len(events) < max_events:
            newline = chunk.find(b"\n", pos)
            if newline < 0:
                if not events:  # one event larger than the budget: read it whole
                    rest = os.pread(self._fd, self.pending_bytes, self._read)
                    newline = rest.find(b"\n")
                    line = rest[: newline if newline >= 0 else len(rest)]
                    return [line], self._read + len(line) + 1
                break
            if events and newline + 1 > budget:
                break
            events.append(chunk[pos:newline])
            pos = newline + 1
        return events, self._read + pos

    def commit(self, position: int) -> None:
        """Everything before ``position`` is delivered; reclaim the file once all of it is."""
        self._read = min(position, self._size)
        if self._read >= self._size:
            os.ftruncate(self._fd, 0)
            self._size = self._read = 0
        self._pos_path.write_text(str(self._read))

    def close(self) -> None:
        if self._fd >= 0:
            if self._dirty:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self._size == 0:
            for path in (self.path, self._pos_path):
                path.unlink(missing_ok=True)
