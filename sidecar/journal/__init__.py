"""The sidecar's durable state: one SQLite database holding the event log, snapshots and closed groups.

An event is acknowledged (``append`` returns) only once the transaction holding it has committed
with ``synchronous=FULL`` in WAL mode, so an acknowledged event survives a process kill and a power
loss. One writer thread owns the only writing connection and commits concurrent appends together
(``sidecar.journal._writer``). Reads use connections of their own and can run from any thread,
even before ``open()`` returns. Every event carries an idempotency key; a second event with a
stored key is acknowledged and changes nothing. Call the coroutines from an asyncio event loop.

Records are never deleted: the log is the state's source of truth, and a snapshot (the state as of
one seq, ``snapshots``) only saves replaying what it covers. So a snapshot that fails its checks
costs time, never records. Closed task groups (``groups``) are the health reducer's digests of
finished tasks, kept on disk instead of in memory (:class:`GroupTable`).

This package is an I/O edge only: no HTTP, no metrics; commit timings go to ``on_commit``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import zlib
from collections.abc import Callable, Generator, Sequence
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
    file_bytes,
    map_sqlite_error,
    open_reader,
    record_crc,
)
from sidecar.journal._types import (
    JournalCorrupt,
    JournalError,
    JournalEvent,
    JournalSchemaError,
    JournalStats,
    JournalUnavailable,
)
from sidecar.journal._writer import Append, Control, PutGroups, PutSnapshot, SetMeta, Writer

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
    "JournalStats",
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
# Replay reads at most _FETCH_ROWS rows into memory at a time, and each read transaction spans at
# most _REPLAY_CHUNK rows, so a slow consumer never pins an old WAL snapshot for the whole replay.
_REPLAY_CHUNK = 1024
_FETCH_ROWS = 32
#: Kind of what :meth:`Journal.replay` yields in place of a record whose CRC does not match.
DAMAGED_KIND = "damaged"
_SELECT_EVENTS = "SELECT seq, run_id, kind, key, payload, crc FROM events WHERE seq > ? ORDER BY seq LIMIT ?"


class Journal:
    """A durable, idempotent, append-only event log in one SQLite file, with its snapshots.

    ``max_batch`` caps the events of one group transaction (a single ``append`` is never split);
    ``max_delay_s`` bounds how long the writer lingers after a request was queued for others to
    join its transaction (only while the group is smaller than the previous one, so a lone
    sequential caller is never delayed). ``on_commit(seconds, new_events)`` is called on the event
    loop after each commit. ``max_db_bytes`` caps the database size: appends beyond it fail with
    JournalUnavailable, as on a full disk. ``keep_snapshots`` is how many snapshots stay stored.
    """

    def __init__(
        self,
        path: Path | str | os.PathLike[str] = DEFAULT_JOURNAL_PATH,
        *,
        max_batch: int = 1024,
        max_delay_s: float = 0.002,
        on_commit: Callable[[float, int], None] | None = None,
        max_db_bytes: int | None = None,
        keep_snapshots: int = 2,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        if max_delay_s < 0:
            raise ValueError(f"max_delay_s must be >= 0, got {max_delay_s!r}")
        if keep_snapshots < 1:
            raise ValueError(f"keep_snapshots must be >= 1, got {keep_snapshots!r}")
        _check_max_bytes(max_db_bytes)
        self._path = Path(path)
        self._max_batch = max_batch
        self._max_delay_s = max_delay_s
        self._on_commit = on_commit
        self._max_db_bytes = max_db_bytes
        self.keep_snapshots = keep_snapshots
        self._writer: Writer | None = None
        #: The closed task groups (written through this journal's writer).
        self.groups = GroupTable(self._path, self._put_groups)

    def __repr__(self) -> str:
        state = "new" if self._writer is None else ("closed" if self._writer.stopped.done() else "open")
        return f"Journal({str(self._path)!r}, {state})"

    @property
    def path(self) -> Path:
        return self._path

    @property
    def stats(self) -> JournalStats:
        writer = self._writer
        return JournalStats(
            events=writer.last_seq if writer else 0,
            commits=writer.commits if writer else 0,
            last_commit_wall_time=writer.last_commit_wall_time if writer else None,
            db_bytes=file_bytes(self._path),
        )

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the journal if needed and start the writer thread.

        Raises JournalCorrupt (not a journal: the file is left untouched), JournalSchemaError
        (another schema version) or JournalUnavailable (cannot create or write the file).
        """
        if self._writer is not None:
            raise JournalError(f"journal {self._path} was already opened", path=self._path)
        writer = Writer(
            self._path, max_batch=self._max_batch, max_delay_s=self._max_delay_s, on_commit=self._on_commit
        )
        self._writer = writer
        writer.start()
        try:
            await asyncio.wrap_future(writer.ready)
        except BaseException:
            self._writer = None  # nothing was started: open() may be retried once fixed
            raise
        if self._max_db_bytes is not None:
            await self.set_max_db_bytes(self._max_db_bytes)

    async def close(self) -> None:
        """Commit everything already appended, checkpoint the WAL into the file, stop the writer."""
        writer = self._writer
        if writer is None:
            return
        writer.stop()
        await asyncio.wrap_future(writer.stopped)
        await asyncio.to_thread(writer.join)

    # -- writing --------------------------------------------------------------------------------

    async def append(self, events: Sequence[JournalEvent]) -> list[JournalEvent | None]:
        """Store ``events`` atomically and return, per event, the stored event with its seq, or
        None when its key was already stored (also for a repeat of a key earlier in ``events``).

        Returns only after the commit is durable; raises JournalUnavailable when it failed, and
        then nothing of ``events`` is stored. If the caller is cancelled while waiting, the events
        may still be committed: retrying with the same keys is safe.
        """
        batch = tuple(events)
        for index, event in enumerate(batch):
            _validate(event, index)
        if not batch:
            return []
        result: list[JournalEvent | None] = await self._submit(lambda f, loop: Append(f, loop, events=batch))
        return result

    async def set_meta(self, name: str, value: bytes) -> None:
        """Durably store ``value`` under ``name`` (replacing any previous value)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"meta name must be a non-empty str, got {name!r}")
        if not isinstance(value, bytes):
            raise TypeError(f"meta {name!r}: value must be bytes, got {type(value).__name__}")
        await self._submit(lambda f, loop: SetMeta(f, loop, name=name, value=value))

    async def put_snapshot(self, seq: int, body: bytes) -> None:
        """Durably store the state as of ``seq`` and drop all but the newest ``keep_snapshots``.
        Closed groups put before this call are committed before it (one writer, in order)."""
        keep = self.keep_snapshots
        await self._submit(lambda f, loop: PutSnapshot(f, loop, seq=seq, body=body, keep=keep))

    def _put_groups(self, groups: list[tuple[int, bytes]]) -> asyncio.Future[Any]:
        writer = self._writer
        if writer is None:
            raise JournalUnavailable(f"journal {self._path} is not open", path=self._path)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        writer.submit(PutGroups(future, loop, groups=groups))
        return future

    async def set_max_db_bytes(self, max_db_bytes: int | None) -> None:
        """Cap (or with None uncap) the database size, effective for the next commit.

        A cap below the current size freezes growth at the current size.
        """
        _check_max_bytes(max_db_bytes)

        def apply(wc: WriterConnection) -> None:
            pages = wc.default_max_pages if max_db_bytes is None else max(1, max_db_bytes // wc.page_size)
            wc.conn.execute(f"PRAGMA max_page_count = {int(pages)}").fetchall()

        await self._submit(lambda f, loop: Control(f, loop, apply=apply))
        self._max_db_bytes = max_db_bytes

    async def set_read_only(self, read_only: bool) -> None:
        """Freeze (or thaw) writes, e.g. while the file is backed up: appends then fail with
        JournalUnavailable exactly as on a read-only filesystem; reads keep working."""

        def apply(wc: WriterConnection) -> None:
            wc.conn.execute(f"PRAGMA query_only = {1 if read_only else 0}")

        await self._submit(lambda f, loop: Control(f, loop, apply=apply))

    async def _submit(self, make: Callable[[asyncio.Future[Any], asyncio.AbstractEventLoop], Any]) -> Any:
        writer = self._writer
        if writer is None or not writer.ready.done() or writer.ready.exception() is not None:
            raise JournalUnavailable(f"journal {self._path} is not open", path=self._path)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        writer.submit(make(future, loop))
        return await future

    # -- reading --------------------------------------------------------------------------------

    def replay(self, *, after_seq: int = 0) -> Generator[JournalEvent, None, None]:
        """Yield the committed events with ``seq > after_seq`` in seq order, streaming.

        Reads in short chunks (no long-lived read transaction), so events committed while the
        replay runs are yielded too. Safe from any thread and before ``open()``; yields nothing
        when the journal file does not exist yet. ``close()`` the generator (or exhaust it) to
        release its connection promptly. A record whose stored CRC does not match (damaged on
        disk) is logged and yielded as an empty event of kind :data:`DAMAGED_KIND` with its seq.
        """
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
            rows: list[Any] = []
            try:
                cursor = conn.execute(_SELECT_EVENTS, (last, _REPLAY_CHUNK))
                rows = cursor.fetchmany(_FETCH_ROWS)
            except sqlite3.Error as exc:
                _lenient_or_raise(conn, path, exc)
                continue  # the same chunk again, text decoded leniently
            count = 0
            while rows:
                for seq, run_id, kind, key, payload, crc in rows:
                    if not _intact(run_id, kind, key, payload, crc):
                        yield _damaged(path, seq, key)
                        continue
                    yield JournalEvent(run_id=run_id, kind=kind, key=key, payload=payload, seq=seq)
                count += len(rows)
                last = rows[-1][0]
                try:
                    rows = cursor.fetchmany(_FETCH_ROWS)
                except sqlite3.Error as exc:
                    _lenient_or_raise(conn, path, exc)
                    count = _REPLAY_CHUNK  # not the end: read on from ``last``
                    break
            if count < _REPLAY_CHUNK:
                return
    finally:
        conn.close()


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _lenient_or_raise(conn: sqlite3.Connection, path: Path, exc: sqlite3.Error) -> None:
    """A damaged type byte can turn a column into text that is not UTF-8, which the default
    decoding refuses (failing the whole replay): read on decoding leniently, so that record
    fails its CRC instead. Any other error is the journal's read error."""
    if "decode" in str(exc) and conn.text_factory is not _lenient_text:
        conn.text_factory = _lenient_text
        return
    raise map_sqlite_error(path, "read", exc) from exc


def _intact(run_id: object, kind: object, key: object, payload: object, crc: object) -> bool:
    if not (isinstance(run_id, str) and isinstance(kind, str) and isinstance(key, str)):
        return False  # a damaged type byte: SQLite hands back another type
    return isinstance(payload, bytes) and crc == record_crc(run_id, kind, key, payload)


def _damaged(path: Path, seq: int, key: object) -> JournalEvent:
    """A record whose CRC does not match: the placeholder the replay yields in its place."""
    _log.warning("journal record damaged, skipped", path=str(path), seq=seq, key=str(key)[:200])
    return JournalEvent(run_id="", kind=DAMAGED_KIND, key=str(key), payload=b"", seq=seq)


def _validate(event: object, index: int) -> None:
    if not isinstance(event, JournalEvent):
        raise TypeError(f"events[{index}] must be a JournalEvent, got {type(event).__name__}")
    for name in ("run_id", "kind", "key"):
        value = getattr(event, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"events[{index}].{name} must be a non-empty str, got {value!r}")
    if not isinstance(event.payload, bytes):
        raise TypeError(
            f"events[{index}] (key {event.key!r}): payload must be bytes, got {type(event.payload).__name__}"
        )


def _check_max_bytes(value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value <= 0):
        raise ValueError(f"max_db_bytes must be a positive int or None, got {value!r}")
