"""WAL checkpoints that stay off the acknowledgement path and keep the WAL bounded.

SQLite's automatic checkpoint runs inside the COMMIT that crosses its threshold, so that
commit's callers wait while the WAL is copied into the database file and fsynced. The journal
turns it off and splits the work in two:

* a background thread copies committed frames on a connection of its own (PASSIVE), in
  parallel with the writer's next commits; it cannot finish while the writer keeps appending;
* every ``complete_every_bytes`` the writer, between transactions and after delivering the acks,
  runs a PASSIVE checkpoint itself. No write is in flight then, so that checkpoint completes
  (unless a reader pins an old snapshot) and copies only what the background thread left over;
  the next transaction then restarts the WAL from its beginning instead of growing it.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import structlog

__all__ = ["Checkpointer"]

_log = structlog.get_logger("sidecar.journal")

_PER_EVENT_OVERHEAD = 128  # row header, key and index entry, roughly, in WAL bytes
_PER_COMMIT_OVERHEAD = 2 * 4096  # b-tree pages touched by any commit


class Checkpointer(threading.Thread):
    """The background half; :meth:`note_commit` and :meth:`complete` are the writer's half."""

    def __init__(
        self,
        path: Path,
        *,
        background_every_bytes: int = 4 * 1024 * 1024,
        complete_every_bytes: int = 32 * 1024 * 1024,
        idle_interval_s: float = 1.0,
    ) -> None:
        super().__init__(name=f"journal-checkpoint:{path.name}", daemon=True)
        self.path = path
        self._background_every = background_every_bytes
        self._complete_every = complete_every_bytes
        self._idle_interval_s = idle_interval_s
        self._checkpoint_lock = threading.Lock()  # one checkpoint at a time
        self._wake = threading.Event()
        self._stopping = False
        self._dirty = False  # committed since the background thread's last pass
        self._since_background = 0  # estimated WAL bytes since the last background pass
        self._since_complete = 0  # estimated WAL bytes since the last complete checkpoint

    def note_commit(self, events: int, payload_bytes: int) -> bool:
        """Account for a commit (writer thread); True when the writer should :meth:`complete`."""
        written = payload_bytes + events * _PER_EVENT_OVERHEAD + _PER_COMMIT_OVERHEAD
        self._since_background += written
        self._since_complete += written
        self._dirty = True
        if self._since_background >= self._background_every:
            self._since_background = 0
            self._wake.set()
        return self._since_complete >= self._complete_every

    def complete(self, conn: sqlite3.Connection) -> None:
        """Checkpoint on the writer's connection between transactions (writer thread)."""
        with self._checkpoint_lock:
            busy, log_frames, done_frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy == 0 and log_frames == done_frames:
            self._since_complete = 0
        else:  # a reader holds an old snapshot: try again after the next commit
            _log.debug("journal_checkpoint_incomplete", path=str(self.path), log=log_frames, done=done_frames)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self.is_alive():
            self.join()

    def run(self) -> None:
        try:
            conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:  # the writer's own checkpoints still bound the WAL
            _log.warning("journal_checkpointer_unavailable", path=str(self.path), error=str(exc))
            return
        try:
            while not self._stopping:
                self._wake.wait(self._idle_interval_s)
                self._wake.clear()
                if self._stopping:
                    break
                if not self._dirty:
                    continue
                self._dirty = False
                try:
                    with self._checkpoint_lock:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:
                    _log.warning("journal_checkpoint_failed", path=str(self.path), error=str(exc))
        finally:
            conn.close()
