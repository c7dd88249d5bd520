"""The sidecar's durable state: one SQLite database holding the event log, snapshots and closed groups.

``append`` returns only once its commit (WAL, ``synchronous=FULL``) survives a kill or power loss;
a stored idempotency key makes a repeat a no-op. Records are never deleted: a bad snapshot costs
replay time, never records.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
import zlib
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from sidecar.journal._facts import (
    FACTS_FORMAT,
    STATE_SCHEMA,
    CompletedFact,
    Disposition,
    DrainedFact,
    Fact,
    FactError,
    FailedFact,
    LatencyFact,
    RunEndedFact,
    RunStartedFact,
    StartedFact,
    decode_fact,
    digest_fields,
    encode_fact,
    pack,
    parse_deferred,
    unpack,
)
from sidecar.journal._groups import GroupDamaged, GroupTable
from sidecar.journal._schema import (
    SCHEMA_VERSION,
    WriterConnection,
    map_sqlite_error,
    open_reader,
    open_writer,
    record_crc,
)
from sidecar.journal._types import (
    JournalCorrupt,
    JournalError,
    JournalEvent,
    JournalSchemaError,
    JournalUnavailable,
)

__all__ = [
    "DAMAGED_KIND",
    "DEFAULT_JOURNAL_PATH",
    "FACTS_FORMAT",
    "SCHEMA_VERSION",
    "STATE_SCHEMA",
    "CompletedFact",
    "Disposition",
    "DrainedFact",
    "Fact",
    "FactError",
    "FailedFact",
    "GroupDamaged",
    "GroupTable",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "JournalEvent",
    "JournalSchemaError",
    "JournalUnavailable",
    "LatencyFact",
    "RunEndedFact",
    "RunStartedFact",
    "StartedFact",
    "decode_fact",
    "digest_fields",
    "encode_fact",
    "pack",
    "parse_deferred",
    "unpack",
]

_log = structlog.get_logger("sidecar.journal")

DEFAULT_JOURNAL_PATH = Path("sidecar-state/journal.sqlite3")
# Replay reads _REPLAY_CHUNK rows per read transaction: memory stays flat and a slow consumer never
# pins an old WAL snapshot for the whole replay.
_REPLAY_CHUNK = 64
#: Kind of what :meth:`Journal.replay` yields in place of a record whose CRC does not match.
DAMAGED_KIND = "damaged"
_SELECT_EVENTS = "SELECT seq, run_id, kind, key, payload, crc FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
_INSERT = (  # ORDER BY keeps the events' order: the first of two equal keys is stored
    "INSERT INTO events (run_id, kind, key, payload, crc) SELECT column2, column3, column4, column5, column6"
    " FROM (VALUES {}) WHERE true ORDER BY column1 ON CONFLICT (key) DO NOTHING"
)
_UPSERT_META = "INSERT INTO meta VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value"
_PRUNE_SNAPSHOTS = (
    "DELETE FROM snapshots WHERE seq NOT IN (SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)"
)
_MAX_GROUP = 1024  # events per transaction (a single append is never split)
_CHECKPOINT_EVERY_BYTES = 8 << 20  # about this much WAL between the writer's checkpoints


@dataclass(slots=True)
class _Request:
    """Queued work: events to append, or a write run inside the group's transaction."""

    work: tuple[JournalEvent, ...] | Callable[[sqlite3.Cursor], object]
    future: asyncio.Future[Any]


def _insert(
    cursor: sqlite3.Cursor, events: Sequence[JournalEvent], last_seq: int
) -> list[JournalEvent | None]:
    """Insert ``events`` after seq ``last_seq``; per event, the stored event or None (key already stored).
    One statement per 1,024 events: each statement's GIL release costs a wait behind the event loop."""
    for start in range(0, len(events), 1024):
        chunk = events[start : start + 1024]
        params = [v for i, e in enumerate(chunk) for v in (i, *e[:4], record_crc(*e[:4]))]
        cursor.execute(_INSERT.format(",".join(["(?,?,?,?,?,?)"] * len(chunk))), params)
    if cursor.rowcount == len(events) <= 1024:  # every event stored, in order: seqs are the next ones
        return [event._replace(seq=last_seq + index) for index, event in enumerate(events, 1)]
    seqs = dict(cursor.execute("SELECT key, seq FROM events WHERE seq > ?", (last_seq,)).fetchall())
    return [None if (seq := seqs.pop(e.key, None)) is None else e._replace(seq=seq) for e in events]


class Journal:
    """A durable, idempotent, append-only event log in one SQLite file, with its snapshots.

    One flusher commits everything queued as one transaction on the only writing connection, so
    concurrent appends share an fsync and a lone caller never waits for company.
    """

    def __init__(
        self,
        path: Path | str | os.PathLike[str] = DEFAULT_JOURNAL_PATH,
        *,
        on_commit: Callable[[float, int], None] | None = None,
        keep_snapshots: int = 2,
    ) -> None:
        if keep_snapshots < 1:
            raise ValueError(f"keep_snapshots must be >= 1, got {keep_snapshots!r}")
        self.path = self._path = Path(path)
        self._on_commit = on_commit
        self.keep_snapshots = keep_snapshots
        self._wc: WriterConnection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._state = "new"
        self._queue: list[_Request] = []
        self._flusher: asyncio.Task[None] | None = None
        self._last_seq = 0
        self._since_checkpoint = 0
        self._timing: tuple[float, int] | None = None
        #: The closed task groups (written through this journal's writer).
        self.groups = GroupTable(self._path, self._put_groups)

    @property
    def events(self) -> int:
        """Records stored (the last seq), which ``/readyz`` shows during a replay."""
        return self._last_seq

    async def open(self) -> None:
        """Create the journal if needed and open its writing connection. Raises JournalCorrupt
        (left untouched), JournalSchemaError or JournalUnavailable (cannot create or write)."""
        if self._state != "new":
            raise JournalError(f"journal {self._path} was already opened", path=self._path)
        executor = ThreadPoolExecutor(1, thread_name_prefix=f"journal-writer:{self._path.name}")
        try:
            wc = await asyncio.get_running_loop().run_in_executor(executor, open_writer, self._path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._wc, self._executor, self._state, self._last_seq = wc, executor, "open", wc.last_seq

    async def close(self) -> None:
        """Commit everything already appended, checkpoint the WAL into the file, close."""
        if self._state != "open":
            return
        self._state = "closed"
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        wc, executor = self._wc, self._executor
        assert wc is not None and executor is not None
        await asyncio.get_running_loop().run_in_executor(executor, self._shutdown, wc)
        executor.shutdown(wait=True)
        self.groups.close()

    def _shutdown(self, wc: WriterConnection) -> None:
        try:
            wc.conn.execute("PRAGMA query_only = 0")
            wc.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:  # costs only WAL replay at the next start
            _log.warning("journal_checkpoint_failed", path=str(self._path), error=str(exc))
        finally:
            wc.close()

    async def append(self, events: Sequence[JournalEvent]) -> list[JournalEvent | None]:
        """Store ``events`` atomically once durable; per event, the stored event or None (key already
        stored). JournalUnavailable: nothing stored. A cancelled caller may retry with the same keys."""
        batch = tuple(events)
        if not batch:
            return []
        result: list[JournalEvent | None] = await self._enqueue(batch)
        return result

    async def set_meta(self, name: str, value: bytes) -> None:
        """Durably store ``value`` under ``name`` (replacing any previous value)."""
        await self._enqueue(lambda cur: cur.execute(_UPSERT_META, (name, value)))

    async def put_snapshot(self, seq: int, body: bytes) -> None:
        """Durably store the state as of ``seq`` and drop all but the newest ``keep_snapshots``.
        Closed groups put before this call are committed before it (one queue, in order)."""

        def write(cur: sqlite3.Cursor) -> None:
            cur.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (seq, body, zlib.crc32(body)))
            cur.execute(_PRUNE_SNAPSHOTS, (self.keep_snapshots,))

        await self._enqueue(write)

    def _put_groups(self, groups: list[tuple[int, bytes]]) -> asyncio.Future[Any]:
        rows = [(ref, body, zlib.crc32(body)) for ref, body in groups]
        return self._enqueue(
            lambda cur: cur.executemany("INSERT OR REPLACE INTO groups VALUES (?, ?, ?)", rows)
        )

    async def set_max_db_bytes(self, max_db_bytes: int | None) -> None:
        """Cap (None: uncap) the database size from the next commit on, so appends fail as on a full disk."""
        wc = self._wc
        assert wc is not None
        pages = wc.default_max_pages if max_db_bytes is None else max(1, max_db_bytes // wc.page_size)
        await self._control(f"PRAGMA max_page_count = {int(pages)}")

    async def set_read_only(self, read_only: bool) -> None:
        """Freeze (or thaw) writes as a read-only filesystem would; reads keep working."""
        await self._control(f"PRAGMA query_only = {1 if read_only else 0}")

    async def _control(self, pragma: str) -> None:
        if self._state != "open" or self._executor is None or self._wc is None:
            raise JournalUnavailable(f"journal {self._path} is not open", path=self._path)
        conn = self._wc.conn
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: conn.execute(pragma).fetchall()
            )
        except sqlite3.Error as exc:
            raise map_sqlite_error(self._path, "configure", exc) from exc

    def _enqueue(
        self, work: tuple[JournalEvent, ...] | Callable[[sqlite3.Cursor], object]
    ) -> asyncio.Future[Any]:
        if self._state != "open":
            word = "closed" if self._state == "closed" else "not open"
            raise JournalUnavailable(f"journal {self._path} is {word}", path=self._path)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append(_Request(work, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush(), name="journal-flush")
        return future

    async def _flush(self) -> None:
        """Commit what is queued, group by group, until the queue is empty."""
        loop = asyncio.get_running_loop()
        while self._queue:
            count, take = 0, 0
            for request in self._queue:
                count += len(request.work) if isinstance(request.work, tuple) else 1
                if take and count > _MAX_GROUP:
                    break
                take += 1
            group, self._queue = self._queue[:take], self._queue[take:]
            try:
                outcomes = await loop.run_in_executor(self._executor, self._commit_group, group)
            except Exception as exc:  # a bug must fail the callers, not leave them waiting
                _log.exception("journal_write_internal_error", path=str(self._path))
                outcomes = [JournalUnavailable(f"journal {self._path}: internal error: {exc!r}")] * take
            for request, outcome in zip(group, outcomes, strict=True):
                if request.future.done():  # the caller was cancelled; its events may be stored
                    continue
                if isinstance(outcome, BaseException):
                    request.future.set_exception(outcome)
                else:
                    request.future.set_result(outcome)
            if self._on_commit is not None and self._timing is not None:
                try:
                    self._on_commit(*self._timing)
                except Exception:
                    _log.exception("journal_on_commit_failed")
            if self._since_checkpoint >= _CHECKPOINT_EVERY_BYTES:  # after the acks
                await loop.run_in_executor(self._executor, self._checkpoint)

    # -- the writer thread ----------------------------------------------------------------------

    def _commit_group(self, group: list[_Request]) -> list[object]:
        """One transaction for ``group``; if it fails, each request alone, so one request that
        cannot be stored (it does not fit) does not take the others down."""
        self._timing = None
        results = self._transact(group)
        if isinstance(results, JournalError):
            if len(group) == 1:
                return [results]
            return [one[0] if isinstance(one, list) else one for one in (self._transact([r]) for r in group)]
        return results

    def _transact(self, group: list[_Request]) -> list[object] | JournalError:
        wc = self._wc
        assert wc is not None
        started = time.perf_counter()
        last_seq, written = self._last_seq, 0
        results: list[object] = []
        cursor = wc.conn.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            for request in group:
                if isinstance(request.work, tuple):
                    stored = _insert(cursor, request.work, last_seq)
                    last_seq = max([last_seq, *(event.seq for event in stored if event is not None)])
                    written += sum(len(event.payload) + 128 for event in stored if event is not None)
                    results.append(stored)
                else:
                    request.work(cursor)
                    results.append(None)
            cursor.execute("COMMIT")
        except sqlite3.Error as exc:
            if wc.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    wc.conn.execute("ROLLBACK")
            error = map_sqlite_error(self._path, "append", exc)
            _log.warning("journal_commit_failed", path=str(self._path), error=str(error))
            return JournalUnavailable(str(error), path=self._path)
        new = last_seq - self._last_seq
        self._last_seq, self._since_checkpoint = last_seq, self._since_checkpoint + written
        self._timing = (time.perf_counter() - started, new)
        return results

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file between transactions, after the acks, so no commit
        waits for it (SQLite's automatic checkpoint runs inside a COMMIT and is turned off);
        the next transaction then restarts the WAL from its beginning instead of growing it."""
        assert self._wc is not None
        try:
            busy, log_frames, done = self._wc.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            _log.warning("journal_checkpoint_failed", path=str(self._path), error=str(exc))
            return
        if busy == 0 and log_frames == done:  # else a reader holds an old snapshot: retry later
            self._since_checkpoint = 0

    # -- reading --------------------------------------------------------------------------------

    def replay(self, *, after_seq: int = 0) -> Generator[JournalEvent, None, None]:
        """Stream the committed events after ``after_seq``, from any thread, in short read chunks; a
        record failing its CRC is yielded as an empty :data:`DAMAGED_KIND` event with its seq."""
        return _replay(self._path, after_seq)

    def stored_keys(self) -> Generator[tuple[int, str], None, None]:
        """``(seq, key)`` of every record stored, in seq order."""
        return self._query("SELECT seq, key FROM events ORDER BY seq")

    def snapshots(self) -> Generator[tuple[int, bytes | None], None, None]:
        """``(seq, body)`` of the stored snapshots, newest first; ``body`` is None when the stored
        CRC does not match (damaged on disk)."""
        for seq, body, crc in self._query("SELECT seq, body, crc FROM snapshots ORDER BY seq DESC"):
            yield seq, (body if isinstance(body, bytes) and zlib.crc32(body) == crc else None)

    def last_seq(self) -> int:
        """The newest record's seq (0: none). Safe from any thread and before ``open()``."""
        for (seq,) in self._query("SELECT coalesce(max(seq), 0) FROM events"):
            return int(seq)
        return 0

    def get_meta(self, name: str) -> bytes | None:
        """The value stored under ``name``, or None. Safe from any thread and before ``open()``."""
        for (value,) in self._query("SELECT value FROM meta WHERE name = ?", (name,)):
            return bytes(value)
        return None

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> Generator[Any, None, None]:
        conn = open_reader(self._path)
        if conn is None:
            return
        try:
            yield from conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise map_sqlite_error(self._path, "read", exc) from exc
        finally:
            conn.close()


def _replay(path: Path, after_seq: int) -> Generator[JournalEvent, None, None]:
    conn = open_reader(path)
    if conn is None:
        return
    try:
        last = after_seq
        while True:
            try:
                rows = conn.execute(_SELECT_EVENTS, (last, _REPLAY_CHUNK)).fetchall()
            except sqlite3.Error as exc:
                # A damaged type byte can make a column text that is not UTF-8: read it leniently,
                # so that record fails its CRC instead of the whole replay.
                if "decode" in str(exc) and conn.text_factory is not _lenient_text:
                    conn.text_factory = _lenient_text
                    continue
                raise map_sqlite_error(path, "read", exc) from exc
            for seq, run_id, kind, key, payload, crc in rows:
                texts = (run_id, kind, key)
                if (
                    isinstance(payload, bytes)
                    and all(type(t) is str for t in texts)
                    and crc == record_crc(*texts, payload)
                ):
                    yield JournalEvent(run_id, kind, key, payload, seq)
                else:  # a damaged record costs itself only
                    _log.warning(
                        "journal record damaged, skipped", path=str(path), seq=seq, key=str(key)[:200]
                    )
                    yield JournalEvent("", DAMAGED_KIND, str(key), b"", seq)
            if len(rows) < _REPLAY_CHUNK:
                return
            last = rows[-1][0]
    finally:
        conn.close()


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
