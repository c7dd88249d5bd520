"""What the exporters must remember across a crash: the tracker run, the last step, the end.

A small SQLite file beside the journal (``<journal>.trackers.sqlite3``), written by the
tracker threads (never the event loop) with ``synchronous=FULL``: a row is on disk before
the next step is sent. After a SIGKILL the service continues the same tracker run (no second
run), at the step after the last one logged (never backwards), and skips a final summary that
was already logged.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExportState", "ExportStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tracker_runs (
    run_id TEXT NOT NULL, tracker TEXT NOT NULL, ref TEXT, step INTEGER NOT NULL DEFAULT -1,
    final INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, tracker));
CREATE TABLE IF NOT EXISTS tracker_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(slots=True)
class ExportState:
    """One run in one tracker: its tracker run id, the last step logged, whether it ended there."""

    ref: str | None = None
    step: int = -1
    final: bool = False


class ExportStore:
    """The side table; safe from any thread (one connection behind a lock)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:" if path is None else str(path), check_same_thread=False,
                                     isolation_level=None)  # fmt: skip
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)
        self.instance = self._instance()

    def _instance(self) -> str:
        """This journal's id, tagged on every tracker run it creates (a run id alone may recur)."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM tracker_meta WHERE name='instance'").fetchone()
            if row is not None:
                return str(row[0])
            value = uuid.uuid4().hex
            self._conn.execute("INSERT INTO tracker_meta VALUES ('instance', ?)", (value,))
            return value

    def get(self, run_id: str, tracker: str) -> ExportState:
        with self._lock:
            row = self._conn.execute(
                "SELECT ref, step, final FROM tracker_runs WHERE run_id=? AND tracker=?", (run_id, tracker)
            ).fetchone()
        return ExportState() if row is None else ExportState(row[0], int(row[1]), bool(row[2]))

    def finished(self, tracker: str) -> set[str]:
        """Runs whose final summary ``tracker`` already holds."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id FROM tracker_runs WHERE tracker=? AND final=1", (tracker,)
            )
            return {str(row[0]) for row in rows}

    def put(self, run_id: str, tracker: str, state: ExportState) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO tracker_runs (run_id, tracker, ref, step, final) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, tracker) DO UPDATE SET ref=excluded.ref, step=excluded.step, "
                "final=excluded.final",
                (run_id, tracker, state.ref, state.step, int(state.final)),
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()
