"""Value types and the exception tree of the journal (re-exported by ``sidecar.journal``)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class JournalEvent(NamedTuple):
    """One event as the journal stores it; ``seq`` is 0 until committed, then its 1-based position."""

    run_id: str
    kind: str
    key: str
    payload: bytes
    seq: int = 0


class JournalError(Exception):
    """Root of every journal failure; ``path`` is the journal file concerned."""

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class JournalUnavailable(JournalError):
    """The journal cannot store right now (disk full, read-only, I/O error, closed): nothing of the
    failed append is stored; the caller answers 503."""


class JournalCorrupt(JournalError):
    """The file is not a rollout-sidecar journal (not SQLite, another application's database,
    or unreadable pages). The journal refuses to start and never overwrites the file."""


class JournalSchemaError(JournalError):
    """The journal has another schema version than this build reads; refusing to touch it."""
