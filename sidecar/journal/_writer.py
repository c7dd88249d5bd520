"""The journal's single writer thread: group commit of queued appends.

Every write goes through one thread that owns the only writing connection. It takes the first
queued request, gathers whatever else arrives until ``max_delay_s`` after that request was queued
or until ``max_batch`` events are gathered, writes them all in one transaction, commits (one WAL
fsync), and only then resolves the callers' futures on their event loop. If the group's
transaction fails, each request is retried in a transaction of its own so that one request that
cannot be stored does not take the others down; whatever fails is reported as JournalUnavailable
and nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sidecar.journal._schema import WriterConnection, map_sqlite_error, open_writer, record_crc
from sidecar.journal._types import JournalError, JournalEvent, JournalUnavailable

__all__ = ["Append", "Control", "PutGroups", "PutSnapshot", "SetMeta", "Writer"]

_log = structlog.get_logger("sidecar.journal")

# Events are inserted by multi-row statements (rows rounded up to a power of two, the padding
# NULL rows that the WHERE clause drops), so a commit runs one statement, not one per event: the
# writer gives up and takes back the interpreter lock a few times per commit, not a few times per
# event (in the service the event loop's thread holds that lock nearly all the time, so each
# take is a wait and two context switches). ``ORDER BY`` keeps the events' order, so the first of
# two equal keys is the one stored and seqs follow the
# append's order; the WHERE clause also disambiguates the upsert's ON for the parser.
_ROW_PARAMS = 6  # ordinal, run_id, kind, key, payload, crc
_STATEMENT_MAX_ROWS = 1024  # 6,144 parameters, far below SQLite's 32,766
_ROW_PADDING = (None,) * _ROW_PARAMS
_SELECT_STORED = "SELECT seq, key FROM events WHERE seq > ? ORDER BY seq"
_CHECKPOINT_EVERY_BYTES = 8 << 20  # about this much WAL between the writer's checkpoints
_PER_EVENT_OVERHEAD = 128  # row header, key and index entry, roughly, in WAL bytes


def _insert_events(rows: int) -> str:
    values = ",".join(["(?,?,?,?,?,?)"] * rows)
    return (
        "INSERT INTO events (run_id, kind, key, payload, crc)"
        f" SELECT column2, column3, column4, column5, column6 FROM (VALUES {values})"
        " WHERE column4 IS NOT NULL"
        " ORDER BY column1 ON CONFLICT (key) DO NOTHING"
    )


_INSERT_EVENTS = {1 << power: _insert_events(1 << power) for power in range(_STATEMENT_MAX_ROWS.bit_length())}
_UPSERT_META = (
    "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)

OnCommit = Callable[[float, int], None]


@dataclass(slots=True)
class _Request:
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class Append(_Request):
    events: Sequence[JournalEvent] = ()


@dataclass(slots=True)
class SetMeta(_Request):
    name: str = ""
    value: bytes = b""


@dataclass(slots=True)
class PutSnapshot(_Request):
    """A snapshot of the state as of ``seq``; all but the newest ``keep`` are then deleted."""

    seq: int = 0
    body: bytes = b""
    keep: int = 2


@dataclass(slots=True)
class PutGroups(_Request):
    """Closed task groups: ``(ref, body)`` pairs."""

    groups: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class Control(_Request):
    """A connection setting (size cap, write freeze) applied between transactions."""

    apply: Callable[[WriterConnection], None] = lambda _: None


_Data = Append | SetMeta | PutSnapshot | PutGroups
_Item = Append | SetMeta | PutSnapshot | PutGroups | Control | None  # None asks the writer to drain and stop


class Writer(threading.Thread):
    """Owns the writing connection; fed through :meth:`submit`, stopped through :meth:`stop`."""

    def __init__(self, path: Path, *, max_batch: int, max_delay_s: float, on_commit: OnCommit | None) -> None:
        super().__init__(name=f"journal-writer:{path.name}", daemon=True)
        self.path = path
        self.ready: ThreadFuture[None] = ThreadFuture()
        self.stopped: ThreadFuture[None] = ThreadFuture()
        self.last_seq = 0
        self.commits = 0
        self.last_commit_wall_time: float | None = None
        self._max_batch = max_batch
        self._max_delay_s = max_delay_s
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._carry: _Item = None
        self._has_carry = False
        self._previous_group = 1
        self._since_checkpoint = 0
        self._accepting = True
        self._lock = threading.Lock()

    # -- called from the event loop -------------------------------------------------------------

    def submit(self, item: _Data | Control) -> None:
        with self._lock:
            if not self._accepting:
                raise JournalUnavailable(f"journal {self.path} is closed", path=self.path)
            self._queue.put(item)

    def stop(self) -> None:
        """Stop accepting; the thread finishes what was queued, checkpoints and exits."""
        with self._lock:
            if self._accepting:
                self._accepting = False
                self._queue.put(None)

    # -- the thread -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            wc = open_writer(self.path)
        except BaseException as exc:
            with self._lock:
                self._accepting = False
            self.ready.set_exception(exc)
            self.stopped.set_result(None)
            return
        self.last_seq = wc.last_seq
        self.ready.set_result(None)
        try:
            self._serve(wc)
        except BaseException:
            _log.exception("journal_writer_crashed", path=str(self.path))
            self._fail_pending()
        finally:
            self._shutdown(wc)
            self.stopped.set_result(None)

    def _fail_pending(self) -> None:
        """After a writer bug: refuse new work and fail what is queued, so no caller hangs."""
        with self._lock:
            self._accepting = False
        pending = [self._carry] if self._has_carry else []
        while True:
            try:
                pending.append(self._queue.get_nowait())
            except queue.Empty:
                break
        failed = [item for item in pending if item is not None]
        error = JournalUnavailable(f"journal {self.path}: the writer stopped after an error", path=self.path)
        self._deliver(failed, error)

    def _next(self) -> _Item:
        if self._has_carry:
            self._has_carry = False
            item, self._carry = self._carry, None
            return item
        return self._queue.get()

    def _serve(self, wc: WriterConnection) -> None:
        while True:
            first = self._next()
            if first is None:
                return
            if isinstance(first, Control):
                self._control(wc, first)
                continue
            self._commit_group(wc, self._gather(first))
            del first  # its payloads must not stay resident while the writer waits for more

    def _gather(self, first: _Data) -> list[_Data]:
        """``first`` plus what is queued or arrives in time, up to ``max_batch`` events.

        Lingering (up to ``max_delay_s`` after ``first`` was queued) only pays when other callers
        are about to append: the callers of the previous group get their acks at about the same
        time and come back together. So the writer waits only while the group is smaller than
        the previous one; a lone sequential caller is never delayed.
        """
        group: list[_Data] = [first]
        count = _size(first)
        deadline = first.enqueued + self._max_delay_s
        while count < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or len(group) >= self._previous_group:
                    break
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
            if item is None or isinstance(item, Control):
                self._carry, self._has_carry = item, True
                break
            group.append(item)
            count += _size(item)
        self._previous_group = len(group)
        return group

    def _commit_group(self, wc: WriterConnection, group: list[_Data]) -> None:
        outcome = self._transact(wc, group)
        if isinstance(outcome, JournalError) and len(group) > 1:
            for request in group:
                self._deliver([request], self._transact(wc, [request]))
        else:
            self._deliver(group, outcome)
        if self._since_checkpoint >= _CHECKPOINT_EVERY_BYTES:
            self._checkpoint(wc)

    def _checkpoint(self, wc: WriterConnection) -> None:
        """Copy the WAL into the database file between transactions, after the acks, so no commit
        waits for it (SQLite's automatic checkpoint runs inside a COMMIT and is turned off);
        the next transaction then restarts the WAL from its beginning instead of growing it."""
        try:
            busy, log_frames, done_frames = wc.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            _log.warning("journal_checkpoint_failed", path=str(self.path), error=str(exc))
            return
        if busy == 0 and log_frames == done_frames:  # else a reader holds an old snapshot: retry later
            self._since_checkpoint = 0

    def _transact(self, wc: WriterConnection, group: list[_Data]) -> _Outcome | JournalError:
        conn = wc.conn
        started = time.perf_counter()
        results: list[list[JournalEvent | None] | None] = []
        new = 0
        written = 0
        last_seq = self.last_seq
        try:
            cursor = conn.cursor()
            # One append that one statement stores needs no BEGIN and COMMIT of its own: the
            # statement is a transaction, committed (WAL fsynced) before execute returns.
            explicit = (
                len(group) > 1 or _size(group[0]) > _STATEMENT_MAX_ROWS or not isinstance(group[0], Append)
            )
            if explicit:
                cursor.execute("BEGIN IMMEDIATE")
            for request in group:
                if not isinstance(request, Append):
                    written += _write_other(cursor, request)
                    results.append(None)
                    continue
                stored = _insert(cursor, request.events, last_seq)
                for event in stored:
                    if event is not None:
                        last_seq = event.seq
                        new += 1
                        written += len(event.payload)
                results.append(stored)
            if explicit:
                cursor.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            error = map_sqlite_error(self.path, "append", exc)
            _log.warning("journal_commit_failed", path=str(self.path), error=str(error))
            return JournalUnavailable(str(error), path=self.path)
        except Exception as exc:  # a bug must fail the callers, not kill the only writer
            _rollback(conn)
            _log.exception("journal_write_internal_error", path=str(self.path))
            return JournalUnavailable(
                f"journal {self.path}: internal error while writing: {exc!r}", path=self.path
            )
        self.last_seq = last_seq
        self.commits += 1
        self.last_commit_wall_time = time.time()
        self._since_checkpoint += written + new * _PER_EVENT_OVERHEAD
        return _Outcome(results, time.perf_counter() - started, new)

    def _deliver(
        self, group: Sequence[_Request], outcome: _Outcome | JournalError, *, report: bool = True
    ) -> None:
        """Resolve the futures of ``group`` on their loops (one wake-up per loop)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Request, Any]]] = {}
        for index, request in enumerate(group):
            value: Any
            if isinstance(outcome, JournalError):  # one exception object per caller's traceback
                value = type(outcome)(str(outcome), path=outcome.path)
            else:
                value = outcome.results[index]
            by_loop.setdefault(request.loop, []).append((request, value))
        timing = None
        if report and not isinstance(outcome, JournalError):
            timing = (outcome.seconds, outcome.new_events)
        for loop, pairs in by_loop.items():
            callback = _resolver(pairs, self._on_commit, timing)
            timing = None  # report a commit once even if its callers span several loops
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
                loop.call_soon_threadsafe(callback)

    def _control(self, wc: WriterConnection, request: Control) -> None:
        try:
            request.apply(wc)
        except sqlite3.Error as exc:
            error = map_sqlite_error(self.path, "configure", exc)
            self._deliver([request], JournalUnavailable(str(error), path=self.path))
        else:
            self._deliver([request], _Outcome([None], 0.0, 0), report=False)

    def _shutdown(self, wc: WriterConnection) -> None:
        """Checkpoint the WAL into the database file and close; failures only cost WAL replay."""
        try:
            wc.conn.execute("PRAGMA query_only = 0")
            wc.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            _log.warning("journal_checkpoint_failed", path=str(self.path), error=str(exc))
        finally:
            wc.close()


@dataclass(frozen=True, slots=True)
class _Outcome:
    results: list[Any]
    seconds: float
    new_events: int


def _insert(
    cursor: sqlite3.Cursor, events: Sequence[JournalEvent], last_seq: int
) -> list[JournalEvent | None]:
    """Insert ``events`` after the record ``last_seq``; per event, the stored event with its seq,
    or None when its key was already stored (earlier, or by an equal key before it in ``events``)."""
    stored: list[JournalEvent | None] = []
    for start in range(0, len(events), _STATEMENT_MAX_ROWS):
        chunk = events[start : start + _STATEMENT_MAX_ROWS]
        rows = 1 << (len(chunk) - 1).bit_length()
        params: list[object] = []
        for ordinal, event in enumerate(chunk):
            params += (
                ordinal,
                event.run_id,
                event.kind,
                event.key,
                event.payload,
                record_crc(event.run_id, event.kind, event.key, event.payload),
            )
        params += _ROW_PADDING * (rows - len(chunk))
        cursor.execute(_INSERT_EVENTS[rows], params)
        if cursor.rowcount == len(chunk) and cursor.lastrowid == last_seq + len(chunk):
            for event in chunk:  # every event stored, in order: seqs are the next ones
                last_seq += 1
                stored.append(JournalEvent(event.run_id, event.kind, event.key, event.payload, last_seq))
            continue
        seqs = {key: seq for seq, key in cursor.execute(_SELECT_STORED, (last_seq,))}
        for event in chunk:
            seq = seqs.pop(event.key, None)  # popped: a repeat of the key in ``chunk`` is a duplicate
            stored.append(
                None if seq is None else JournalEvent(event.run_id, event.kind, event.key, event.payload, seq)
            )
            last_seq = max(last_seq, seq or 0)
    return stored


def _write_other(cursor: sqlite3.Cursor, request: SetMeta | PutSnapshot | PutGroups) -> int:
    """Write a request other than an append inside the group's transaction; the bytes written."""
    if isinstance(request, SetMeta):
        cursor.execute(_UPSERT_META, (request.name, request.value))
        return len(request.value)
    if isinstance(request, PutSnapshot):
        cursor.execute(
            "INSERT OR REPLACE INTO snapshots (seq, body, crc) VALUES (?, ?, ?)",
            (request.seq, request.body, zlib.crc32(request.body)),
        )
        cursor.execute(
            "DELETE FROM snapshots WHERE seq NOT IN (SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)",
            (request.keep,),
        )
        return len(request.body)
    cursor.executemany(
        "INSERT OR REPLACE INTO groups (ref, body, crc) VALUES (?, ?, ?)",
        [(ref, body, zlib.crc32(body)) for ref, body in request.groups],
    )
    return sum(len(body) for _, body in request.groups)


def _size(request: _Data) -> int:
    return len(request.events) if isinstance(request, Append) else 1


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            _log.warning("journal_rollback_failed", error=str(exc))


def _resolver(
    pairs: list[tuple[_Request, Any]], on_commit: OnCommit | None, timing: tuple[float, int] | None
) -> Callable[[], None]:
    def resolve() -> None:
        for request, value in pairs:
            if request.future.done():  # the caller was cancelled; its events may still be stored
                continue
            if isinstance(value, BaseException):
                request.future.set_exception(value)
            else:
                request.future.set_result(value)
        if on_commit is not None and timing is not None:
            try:
                on_commit(*timing)
            except Exception:
                _log.exception("journal_on_commit_failed")

    return resolve
