"""Opening a journal file: identity checks, the schema, SQLite error mapping.

Every record and blob carries its CRC-32 (:func:`record_crc`), as SQLite pages have none; another
version, a foreign database or a non-SQLite file is refused before anything is written to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecar.journal._types import JournalCorrupt, JournalError, JournalSchemaError, JournalUnavailable

_log = structlog.get_logger("sidecar.journal")

APPLICATION_ID = 0x52534A4C  # "RSJL": marks the file as a rollout-sidecar journal
_SQLITE_MAGIC = b"SQLite format 3\x00"
_PAGE_SIZE = 4096  # an ~8 KB payload fills two overflow pages with little slack (16 KB pages: 1 row each)
_BUSY_TIMEOUT_MS = 5000
_WAL_SIZE_LIMIT = 64 * 1024 * 1024  # truncate the WAL back to this after checkpoints

_TABLES = """
CREATE TABLE events (seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, kind TEXT NOT NULL,
    key TEXT NOT NULL UNIQUE, payload BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE snapshots (seq INTEGER PRIMARY KEY, body BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE groups (ref INTEGER PRIMARY KEY, body BLOB NOT NULL, crc INTEGER NOT NULL);
"""
SCHEMA_VERSION = 5

_REASONS = {  # SQLite's own message names the rest
    sqlite3.SQLITE_FULL: "disk full or journal size limit reached",
    sqlite3.SQLITE_READONLY: "journal is read-only",
}
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# Journals this process holds open for writing (real paths). Closing any descriptor of a file
# drops every POSIX lock the process holds on it, SQLite's included; so while our writer is open
# we never open the database file ourselves, or another process could take its exclusive lock
# and delete the live WAL under the writer (acknowledged commits then vanish on a crash).
_WRITING: set[str] = set()


def record_crc(run_id: str, kind: str, key: str, payload: bytes) -> int:
    """The CRC-32 a record is stored with: over its run, kind, key and payload."""
    head = f"{run_id}\x00{kind}\x00{key}\x00".encode(errors="surrogatepass")
    return zlib.crc32(payload, zlib.crc32(head))


def map_sqlite_error(path: Path, action: str, exc: sqlite3.Error) -> JournalError:
    """Translate an SQLite failure into the journal's tree, naming the path, action and cause."""
    errorcode = getattr(exc, "sqlite_errorcode", None)  # absent on errors the module raises itself
    code = errorcode & 0xFF if isinstance(errorcode, int) else -1
    reason = _REASONS.get(code, "SQLite error")
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    message = f"journal {path}: {action} failed: {reason} ({name}: {exc})"
    if code in _CORRUPT_CODES:
        return JournalCorrupt(message, path=path)
    return JournalUnavailable(message, path=path)


def _check_header(path: Path) -> bool:
    """True if ``path`` holds an SQLite database, False if absent or empty; JournalCorrupt for
    anything else, before SQLite opens (and could write) it."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise JournalUnavailable(f"journal {path}: cannot read the file: {exc}", path=path) from exc
    if not head:
        return False
    if head != _SQLITE_MAGIC:
        raise JournalCorrupt(
            f"journal {path} is not an SQLite database (starts with {head[:16]!r}); "
            "refusing to use or overwrite it: move it away or point the journal elsewhere",
            path=path,
        )
    return True


def _identify(conn: sqlite3.Connection, path: Path) -> int:
    """The journal's schema version (0 for a blank database); refuse foreign or other files."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if app_id == version == 0 and not tables:
        return 0
    if app_id != APPLICATION_ID:
        raise JournalCorrupt(
            f"journal {path} is an SQLite database of another application (tables {tables}, "
            f"application_id {app_id:#x}); refusing to use it",
            path=path,
        )
    if version != SCHEMA_VERSION:
        raise JournalSchemaError(
            f"journal {path} has schema version {version}, this build reads version {SCHEMA_VERSION} "
            "only; refusing to open it: start on a new journal path (or use the build that wrote it)",
            path=path,
        )
    return int(version)


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a journal whose b-trees are damaged (SQLite pages carry no checksums, so a damaged
    index would otherwise go unnoticed and let a duplicate key in). Reads every page once:
    about 0.1 s per 200 MB."""
    problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise _PagesDamaged(
            f"journal {path} is damaged ({'; '.join(problems)}); refusing to use it: restore a backup "
            "or salvage it with the sqlite3 shell's .recover into a new file",
            path=path,
        )


class _PagesDamaged(JournalCorrupt):
    """An SQLite journal of ours whose pages do not hold together (a WAL may be the cause)."""


def _create(conn: sqlite3.Connection) -> None:
    """Create the tables and stamp the file as a journal of this schema, in one transaction."""
    conn.executescript(
        f"BEGIN IMMEDIATE; {_TABLES} PRAGMA application_id = {APPLICATION_ID};"
        f" PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
    )


@dataclass(frozen=True, slots=True)
class WriterConnection:
    """The writer's connection and what it learned while opening the journal."""

    conn: sqlite3.Connection
    last_seq: int
    page_size: int
    default_max_pages: int
    lock_fd: int
    real_path: str = ""

    def close(self) -> None:
        """Close the connection, then release the single-writer lock."""
        try:
            self.conn.close()
        finally:
            _WRITING.discard(self.real_path)
            os.close(self.lock_fd)


def _lock_single_writer(path: Path) -> int:
    """Hold an exclusive lock on ``<journal>.lock`` so a second writer (process or instance) is
    refused instead of interleaving its events with ours; the kernel drops it if we die."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise JournalUnavailable(
            f"journal {path}: cannot open its lock file {lock_path}: {exc}", path=path
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise JournalUnavailable(
            f"journal {path} is already open for writing (lock {lock_path} held by pid {holder})", path=path
        ) from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def open_writer(path: Path) -> WriterConnection:
    """Open (creating if needed) the journal for writing: WAL, ``synchronous=FULL``, checkpoints
    between commits. Pages damaged beside a WAL are retried once with the WAL set aside as
    ``<journal>-wal.bad`` (the file alone holds every commit up to its last checkpoint)."""
    try:
        return _open_writer(path)
    except _PagesDamaged as damaged:
        wal = path.with_name(path.name + "-wal")
        with contextlib.suppress(OSError):
            if wal.stat().st_size > 0:
                return _open_without_wal(path, wal, damaged)
        raise


def _open_without_wal(path: Path, wal: Path, damaged: JournalCorrupt) -> WriterConnection:
    aside = wal.with_name(wal.name + ".bad")
    os.replace(wal, aside)
    with contextlib.suppress(FileNotFoundError):  # the WAL's index: rebuilt from what is there
        path.with_name(path.name + "-shm").unlink()
    try:
        opened = _open_writer(path)
    except JournalError as again:
        os.replace(aside, wal)
        raise JournalCorrupt(
            f"{damaged} (and without its WAL: {again}); the journal and its WAL are kept as they were",
            path=path,
        ) from again
    # Commits only the WAL held are lost; the database file holds the rest.
    _log.warning("journal WAL set aside", path=str(path), kept_as=str(aside), reason=str(damaged))
    return opened


def _open_writer(path: Path) -> WriterConnection:
    existed = _check_header(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalUnavailable(f"journal {path}: cannot create its directory: {exc}", path=path) from exc
    lock_fd = _lock_single_writer(path)
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        os.close(lock_fd)
        raise map_sqlite_error(path, "open", exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        version = _identify(conn, path)
        if existed:
            _quick_check(conn, path)
        if version == 0 and not existed:
            conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
            # Old snapshots are deleted as new ones are written: give their pages back.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise JournalUnavailable(f"journal {path}: cannot enable WAL mode (got {mode!r})", path=path)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        if version == 0:
            _create(conn)
        last_seq = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        default_max_pages = conn.execute("PRAGMA max_page_count").fetchone()[0]
    except BaseException as exc:
        conn.close()
        os.close(lock_fd)
        if not isinstance(exc, sqlite3.Error):
            raise
        error = map_sqlite_error(path, "open", exc)
        raise (
            _PagesDamaged(str(error), path=path) if existed and isinstance(error, JournalCorrupt) else error
        ) from exc
    real_path = os.path.realpath(path)
    _WRITING.add(real_path)
    return WriterConnection(conn, int(last_seq), int(page_size), int(default_max_pages), lock_fd, real_path)


def open_reader(path: Path) -> sqlite3.Connection | None:
    """A query-only connection (None: no journal yet), refusing what the writer refuses; never
    creates the file."""
    if os.path.realpath(path) not in _WRITING and not _check_header(path):  # see _WRITING
        return None
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise map_sqlite_error(path, "open for reading", exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only = 1")
        if _identify(conn, path) == 0:
            conn.close()
            return None
    except BaseException as exc:
        conn.close()
        if isinstance(exc, sqlite3.Error):
            raise map_sqlite_error(path, "open for reading", exc) from exc
        raise
    return conn
