"""Closed task groups in the journal's ``groups`` table: the health reducer's store.

A put is answered at once and kept in memory until committed (:meth:`GroupTable.flush`), so the
loop never waits on the disk and a snapshot is never stored before the groups it refers to.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.journal._schema import map_sqlite_error, open_reader
from sidecar.journal._types import JournalError


class GroupDamaged(JournalError):
    """A stored group is missing or fails its CRC (the message names it)."""


class GroupTable:
    """``put(blob) -> ref`` and ``get(ref) -> blob`` over the ``groups`` table."""

    def __init__(self, path: Path, write: Callable[[list[tuple[int, bytes]]], asyncio.Future[Any]]) -> None:
        self._path = path
        self._write = write
        #: Groups put and not yet committed, by reference.
        self._pending: dict[int, bytes] = {}
        self._next = 1
        self._reader: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @property
    def next_ref(self) -> int:
        """The reference the next put gets (a snapshot records it: later ones are not its)."""
        return self._next

    def restart_at(self, next_ref: int) -> None:
        """Number new groups from ``next_ref`` (after loading a snapshot that recorded it, or 1)."""
        self._next = next_ref
        self._pending.clear()

    def put(self, blob: bytes) -> int:
        ref = self._next
        self._next += 1
        self._pending[ref] = blob
        return ref

    def get(self, ref: int) -> bytes:
        """The blob of ``ref`` (any thread); raises :class:`GroupDamaged` if it is gone or damaged."""
        blob = self._pending.get(ref)
        if blob is not None:
            return blob
        with self._lock:
            try:
                self._reader = self._reader or open_reader(self._path)
                query = "SELECT body, crc FROM groups WHERE ref = ?"
                row = self._reader.execute(query, (ref,)).fetchone() if self._reader else None
            except sqlite3.Error as exc:
                raise map_sqlite_error(self._path, "read a closed group", exc) from exc
        if row is None or not isinstance(row[0], bytes) or zlib.crc32(row[0]) != row[1]:
            raise GroupDamaged(
                f"journal {self._path}: closed group {ref} is missing or damaged", path=self._path
            )
        return bytes(row[0])

    def damaged_below(self, next_ref: int) -> list[int]:
        """References below ``next_ref`` that are missing or fail their CRC (a start checks the
        groups a snapshot refers to before using it)."""
        conn = open_reader(self._path)
        if conn is None:
            return list(range(1, next_ref))
        try:
            intact = {
                ref
                for ref, body, crc in conn.execute(
                    "SELECT ref, body, crc FROM groups WHERE ref < ?", (next_ref,)
                )
                if isinstance(body, bytes) and zlib.crc32(body) == crc
            }
        except sqlite3.Error as exc:
            raise map_sqlite_error(self._path, "check the closed groups", exc) from exc
        finally:
            conn.close()
        return [ref for ref in range(1, next_ref) if ref not in intact]

    def flush(self) -> asyncio.Future[Any] | None:
        """Hand the groups put so far to the journal's writer, ahead of anything queued after this
        call; the future (None: nothing to write) resolves once they are committed."""
        if not self._pending:
            return None
        batch = list(self._pending.items())
        future = self._write(batch)

        def committed(done: asyncio.Future[Any]) -> None:
            if done.cancelled() or done.exception() is not None:
                return  # kept in memory: written by the next flush
            for ref, _ in batch:
                self._pending.pop(ref, None)

        future.add_done_callback(committed)
        return future

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
