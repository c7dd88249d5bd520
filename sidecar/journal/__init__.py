"""The sidecar's durable embedded journal: an SQLite event log with group commit.

An event is acknowledged (``append`` returns) only once the transaction holding it has committed
with ``synchronous=FULL`` in WAL mode, so an acknowledged event survives a process kill and a power
loss. One writer thread owns the only writing connection and commits concurrent appends together
(see ``sidecar.journal._writer``). Reads (``replay``, ``get_meta``) use connections of their own and can
run from any thread, even before ``open()`` returns. Every event carries an idempotency key; a
second event with a stored key is acknowledged and changes nothing. The journal uses asyncio
futures: call its coroutines from an asyncio event loop (anyio's asyncio backend included).

This module is an I/O edge only: no HTTP, no metrics; commit timings go to ``on_commit``.

Its public surface (``__all__``) is also what the service keeps beside the log: the facts each
record holds (``_facts``), the state snapshots (``_snapshot``) and the closed-groups file
(``_closed_groups``). Use them from here, never from the private modules.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Generator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from sidecar.journal._closed_groups import ClosedGroupFile, ClosedGroupsMark, ClosedGroupsTorn
from sidecar.journal._facts import (
    FACTS_FORMAT,
    HEALTH_PIPELINE_FINGERPRINTS,
    HEALTH_PIPELINE_VERSION,
    READABLE_FACTS_FORMATS,
    READABLE_STATE_SCHEMAS,
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
    health_pipeline_fingerprint,
    is_legacy_payload,
    parse_deferred,
)
from sidecar.journal._recovery import Recovery, load_usable_snapshot
from sidecar.journal._schema import (
    SCHEMA_VERSION,
    WriterConnection,
    file_bytes,
    map_sqlite_error,
    open_reader,
    record_crc,
)
from sidecar.journal._snapshot import (
    SNAPSHOT_FORMAT,
    Snapshot,
    SnapshotStore,
    dumps_state,
    fork_writer,
    loads_state,
)
from sidecar.journal._types import (
    JournalCompacted,
    JournalCorrupt,
    JournalError,
    JournalEvent,
    JournalSchemaError,
    JournalStats,
    JournalUnavailable,
)
from sidecar.journal._writer import Append, Control, SetMeta, Writer

__all__ = [
    "DAMAGED_KIND",
    "DEFAULT_JOURNAL_PATH",
    "FACTS_FORMAT",
    "HEALTH_PIPELINE_FINGERPRINTS",
    "HEALTH_PIPELINE_VERSION",
    "LOST_KIND",
    "READABLE_FACTS_FORMATS",
    "READABLE_STATE_SCHEMAS",
    "SCHEMA_VERSION",
    "SNAPSHOT_FORMAT",
    "STATE_SCHEMA",
    "ClosedGroupFile",
    "ClosedGroupsMark",
    "ClosedGroupsTorn",
    "CompletedFact",
    "Disposition",
    "DrainedFact",
    "Fact",
    "FactError",
    "FailedFact",
    "Journal",
    "JournalCompacted",
    "JournalCorrupt",
    "JournalError",
    "JournalEvent",
    "JournalSchemaError",
    "JournalStats",
    "JournalUnavailable",
    "LatencyFact",
    "Recovery",
    "RunEndedFact",
    "RunStartedFact",
    "Snapshot",
    "SnapshotStore",
    "StartedFact",
    "decode_fact",
    "digest_fields",
    "dumps_state",
    "encode_fact",
    "fork_writer",
    "health_pipeline_fingerprint",
    "is_legacy_payload",
    "load_usable_snapshot",
    "loads_state",
    "parse_deferred",
]

_log = structlog.get_logger("sidecar.journal")

DEFAULT_JOURNAL_PATH = Path("sidecar-state/journal.sqlite3")
# Replay reads at most _FETCH_ROWS rows into memory at a time, and each read transaction spans at
# most _REPLAY_CHUNK rows, so a slow consumer never pins an old WAL snapshot for the whole replay.
_REPLAY_CHUNK = 1024
_FETCH_ROWS = 32
#: Kind of the placeholder record that marks seqs the journal lost (see :meth:`Journal.mark_lost`).
LOST_KIND = "lost"
#: Kind of what :meth:`Journal.replay` yields in place of a record whose CRC does not match.
DAMAGED_KIND = "damaged"
_COMPACTED_THROUGH = "compacted_through"  # meta: every record up to this seq is compacted
_SELECT_EVENTS = (
    "SELECT seq, run_id, kind, key, payload, {crc} FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
)


class Journal:
    """A durable, idempotent, append-only event log in one SQLite file.

    ``max_batch`` caps the events of one group transaction (a single ``append`` is never split);
    ``max_delay_s`` bounds how long the writer lingers after a request was queued for others to
    join its transaction. It lingers only while the group is smaller than the previous one, so a
    lone sequential caller is never delayed; 0 commits whatever is queued at once.
    ``on_commit(seconds, new_events)`` is called on the event loop after each commit with its
    duration (BEGIN to durable COMMIT).
    ``max_db_bytes`` caps the database size: appends beyond it fail with JournalUnavailable, as
    on a full disk.
    """

    def __init__(
        self,
        path: Path | str | os.PathLike[str] = DEFAULT_JOURNAL_PATH,
        *,
        max_batch: int = 1024,
        max_delay_s: float = 0.002,
        on_commit: Callable[[float, int], None] | None = None,
        max_db_bytes: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        if max_delay_s < 0:
            raise ValueError(f"max_delay_s must be >= 0, got {max_delay_s!r}")
        _check_max_bytes(max_db_bytes)
        self._path = Path(path)
        self._max_batch = max_batch
        self._max_delay_s = max_delay_s
        self._on_commit = on_commit
        self._max_db_bytes = max_db_bytes
        self._writer: Writer | None = None

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
        """Create or migrate the journal and start the writer thread.

        Raises JournalCorrupt (not a journal: the file is left untouched), JournalSchemaError
        (written by a newer build) or JournalUnavailable (cannot create or write the file).
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

    async def compact(self, through_seq: int, *, chunk: int = 4096) -> int:
        """Delete the records with ``seq <= through_seq`` (a snapshot covers them), keeping their
        keys in ``compacted_keys`` so a late retry of one is still acknowledged as a duplicate.

        The newest record always stays, so seqs keep increasing. Works in transactions of
        ``chunk`` records so appends interleave; returns how many were compacted. Freed pages
        go back to the filesystem (journals this build created; older ones reuse them).
        """
        if not isinstance(through_seq, int) or through_seq < 0:
            raise ValueError(f"through_seq must be a non-negative int, got {through_seq!r}")
        compacted = 0
        start = int.from_bytes(self.get_meta(_COMPACTED_THROUGH) or b"", "big")
        limit = min(through_seq, self.stats.events - 1)
        while start < limit:
            end = min(limit, start + chunk)
            done: list[int] = []
            step = partial(_compact_range, after_seq=start, through_seq=end, done=done)
            await self._submit(lambda f, loop: Control(f, loop, apply=step))  # noqa: B023
            compacted += done[0] if done else 0
            start = end
        if compacted:
            await self._submit(lambda f, loop: Control(f, loop, apply=_release_free_pages))
        return compacted

    async def mark_lost(self, first: int, last: int) -> None:
        """Record that seqs ``first..last`` were lost (a snapshot holds their effect, the journal
        not): one placeholder record of kind :data:`LOST_KIND` at seq ``last``, so the next record
        is ``last + 1`` and never reuses a seq the snapshot covers. A replay that meets it refuses."""
        writer = self._writer
        if writer is None:
            raise JournalUnavailable(f"journal {self._path} is not open", path=self._path)
        key = f"~lost|{first}..{last}"

        def apply(wc: WriterConnection) -> None:
            wc.conn.execute(
                "INSERT OR IGNORE INTO events (seq, run_id, kind, key, payload) VALUES (?, '', ?, ?, ?)",
                (last, LOST_KIND, key, b""),
            )
            writer.last_seq = max(writer.last_seq, last)

        await self._submit(lambda f, loop: Control(f, loop, apply=apply))

    def stored_keys(self) -> Generator[tuple[int, str], None, None]:
        """``(seq, key)`` of every record ever stored, compacted ones included, in seq order."""
        opened = open_reader(self._path)
        if opened is None:
            return
        conn, version = opened
        try:
            # One read transaction: a compaction moving records between the two tables while
            # they are read would otherwise hide those records from both queries.
            conn.execute("BEGIN")
            if version >= 3:
                yield from conn.execute("SELECT seq, key FROM compacted_keys ORDER BY seq")
            if version >= 1:
                yield from conn.execute("SELECT seq, key FROM events ORDER BY seq")
        except sqlite3.Error as exc:
            raise _read_error(self._path, exc) from exc
        finally:
            conn.close()

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

    def last_seq(self) -> int:
        """The newest record's seq (0: none), read from the file: a snapshot past it covers records
        the journal no longer holds. Safe from any thread and before ``open()``."""
        opened = open_reader(self._path)
        if opened is None:
            return 0
        conn, version = opened
        try:
            if version < 1:
                return 0
            row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        except sqlite3.Error as exc:
            raise _read_error(self._path, exc) from exc
        finally:
            conn.close()
        return int(row[0])

    def get_meta(self, name: str) -> bytes | None:
        """The value stored under ``name``, or None. Safe from any thread and before ``open()``."""
        opened = open_reader(self._path)
        if opened is None:
            return None
        conn, version = opened
        try:
            if version < 2:
                return None
            row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        except sqlite3.Error as exc:
            raise _read_error(self._path, exc) from exc
        finally:
            conn.close()
        return None if row is None else bytes(row[0])


def _replay(path: Path, after_seq: int) -> Generator[JournalEvent, None, None]:
    opened = open_reader(path)
    if opened is None:
        return
    conn, version = opened
    try:
        if version < 1:
            return
        last = after_seq
        select = _SELECT_EVENTS.format(crc="crc" if version >= 4 else "NULL")
        while True:
            rows: list[Any] = []
            try:
                cursor = conn.execute(select, (last, _REPLAY_CHUNK))
                rows = cursor.fetchmany(_FETCH_ROWS)
            except sqlite3.Error as exc:
                _lenient_or_raise(conn, path, exc)
                continue  # the same chunk again, text decoded leniently
            count = 0
            while rows:
                for seq, run_id, kind, key, payload, crc in rows:
                    if crc is not None and not _intact(run_id, kind, key, payload, crc):
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
    raise _read_error(path, exc) from exc


def _intact(run_id: object, kind: object, key: object, payload: object, crc: object) -> bool:
    if not (isinstance(run_id, str) and isinstance(kind, str) and isinstance(key, str)):
        return False  # a damaged type byte: SQLite hands back another type
    return isinstance(payload, bytes) and crc == record_crc(run_id, kind, key, payload)


def _damaged(path: Path, seq: int, key: object) -> JournalEvent:
    """A record whose CRC does not match: the placeholder the replay yields in its place."""
    _log.warning("journal record damaged, skipped", path=str(path), seq=seq, key=str(key)[:200])
    return JournalEvent(run_id="", kind=DAMAGED_KIND, key=str(key), payload=b"", seq=seq)


def _compact_range(wc: WriterConnection, *, after_seq: int, through_seq: int, done: list[int]) -> None:
    """Move ``after_seq < seq <= through_seq`` to ``compacted_keys`` and record the progress, atomically."""
    conn = wc.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT OR IGNORE INTO compacted_keys (key, seq)"
            " SELECT key, seq FROM events WHERE seq > ? AND seq <= ?",
            (after_seq, through_seq),
        )
        cursor = conn.execute("DELETE FROM events WHERE seq > ? AND seq <= ?", (after_seq, through_seq))
        conn.execute(
            "INSERT INTO meta (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (_COMPACTED_THROUGH, through_seq.to_bytes(8, "big")),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    done.append(cursor.rowcount)


def _release_free_pages(wc: WriterConnection) -> None:
    """Return freed pages to the filesystem (journals created with ``auto_vacuum = INCREMENTAL``;
    a no-op for older ones, whose freed pages are reused by later appends instead)."""
    wc.conn.executescript("PRAGMA incremental_vacuum;")  # runs it to the end (execute frees one page)


def _read_error(path: Path, exc: sqlite3.Error) -> JournalError:
    return map_sqlite_error(path, "read", exc)


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
