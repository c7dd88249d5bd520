"""Delivery: a FIFO of encoded events, batched, retried, spilled to disk, never blocking the caller.

One logical queue: the batch in flight, the spool (older), memory (newer); the spool survives a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
from collections import deque
from pathlib import Path
from typing import Any

import httpx
import orjson

from .config import ClientConfig, ClientStats

__all__ = ["Sender", "Spool"]

_log = logging.getLogger("dispatcher_client")
_SPILL_CHUNK_BYTES = 1 << 20
#: Backoff rounds (about 10 s) a client that did not start the run waits for someone else to.
_UNKNOWN_RUN_WAITS = 8
_RETRYABLE = frozenset({408, 409, 425, 429})
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_Future = asyncio.Future[dict[str, Any] | None]
_Item = tuple[bytes, _Future | None]


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
        try:
            stored = self._pos_path.read_text().strip()
        except OSError:
            stored = ""
        self._read = min(int(stored) if stored.isdigit() else 0, self._size)
        self._dirty = False

    @property
    def pending_bytes(self) -> int:
        return self._size - self._read

    @property
    def pending(self) -> bool:
        return self._size > self._read

    def fits(self, size: int) -> bool:
        return self.pending_bytes + size <= self.max_bytes

    def append(self, lines: list[bytes]) -> None:
        """Append encoded events (each without newline); ``OSError`` if the disk refuses."""
        view = memoryview(b"".join(line + b"\n" for line in lines))
        self._size += len(view)
        while view:
            view = view[os.write(self._fd, view) :]
        if self._fsync_always:
            os.fsync(self._fd)
        self._dirty = not self._fsync_always

    def sync(self) -> None:
        if self._dirty:
            self._dirty = False
            os.fsync(self._fd)

    def peek(self, max_events: int, max_bytes: int) -> tuple[list[bytes], int]:
        """Up to ``max_events`` / ``max_bytes`` next events (at least one) and the position after them."""
        if not self.pending:
            return [], self._read
        chunk = os.pread(self._fd, min(self.pending_bytes, max(max_bytes, 1) + 1), self._read)
        events: list[bytes] = []
        pos = 0
        while len(events) < max_events:
            newline = chunk.find(b"\n", pos)
            if newline < 0 and not events:  # one event larger than the budget: read it whole
                rest = os.pread(self._fd, self.pending_bytes, self._read)
                line = rest.split(b"\n", 1)[0]
                return [line], self._read + len(line) + 1
            if newline < 0 or (events and newline + 1 > max_bytes):
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
            self.sync()
            os.close(self._fd)
            self._fd = -1
        if self._size == 0:
            self.path.unlink(missing_ok=True)
            self._pos_path.unlink(missing_ok=True)


def _settle(items: list[_Item], results: list[dict[str, Any] | None] | None = None) -> None:
    for index, (_, future) in enumerate(items):
        if future is not None and not future.done():
            future.set_result(results[index] if results is not None else None)


class Sender:
    """Owns delivery of one run's events over a shared ``httpx.AsyncClient``."""

    def __init__(self, http: httpx.AsyncClient, run_id: str, config: ClientConfig, stats: ClientStats, *,
                 headers: dict[str, str]) -> None:
        self._http = http
        self._path = f"/v1/runs/{run_id}/events"
        self._config = config
        self.stats = stats
        self._headers = {"content-type": "application/json", **headers}
        self._memory: deque[_Item] = deque()
        self._memory_bytes = 0
        self._current: list[_Item] = []  # the batch in flight
        self._spool = None if config.spool_dir is None else Spool(
            config.spool_dir, run_id, max_bytes=config.spool_max_bytes, fsync_always=config.fsync == "always")
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        if self._spool is None or not self._spool.pending:  # a spool left by a dead client is pending
            self._idle.set()
        self.run_started: bytes | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._run(), name="sidecar-client-sender"))
        if self._spool is not None and self._config.fsync == "interval":
            self._tasks.append(loop.create_task(self._sync_loop()))

    async def close(self, timeout_s: float) -> None:
        """Try to deliver everything for ``timeout_s`` s; spool or drop (and count) the rest."""
        delivered = await self.flush(timeout_s)
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        leftovers = [] if delivered else [*self._current, *self._memory]
        self._current, self._memory_bytes = [], 0
        self._memory.clear()
        if leftovers and not self._spill(leftovers):
            self.stats.dropped += len(leftovers)
            _settle(leftovers)
            _log.warning("dispatcher_client: closed with %d undelivered event(s)", len(leftovers))
        if self._spool is not None:
            self._spool.close()

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted event is acknowledged (or dropped); False on timeout."""
        try:  # asyncio.timeout, not wait_for: on 3.11 wait_for can turn a Ctrl-C's cancel into a timeout
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    # -- submitting (never awaits) --------------------------------------------------------

    def submit(self, data: bytes, future: _Future | None = None) -> None:
        """Queue one encoded event; ``future`` gets its per-event result (``None`` if not known)."""
        self.stats.submitted += 1
        item = (data, future)
        if self._over(len(data)):
            self._spill_oldest()
        if not self._over(len(data)):
            self._memory.append(item)
            self._memory_bytes += len(data)
        elif self._memory or not self._spill([item]):  # alone over the memory bound: the spool takes it
            _settle([item])
            self.stats.dropped += 1
            if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                _log.warning("dispatcher_client: buffer full, %d event(s) dropped so far", self.stats.dropped)
            return
        self.stats.buffered = len(self._memory)
        self._idle.clear()
        self._wake.set()

    def _over(self, size: int) -> bool:
        config = self._config
        return (len(self._memory) >= config.max_buffered_events
                or self._memory_bytes + size > config.max_buffered_bytes)

    def _spill_oldest(self) -> None:
        """Move the oldest ~1 MiB of memory to the spool's end (a bounded write; order holds)."""
        spool, memory = self._spool, self._memory
        chunk: list[_Item] = []
        size = 0
        while spool is not None and memory and size < _SPILL_CHUNK_BYTES and len(chunk) < 4096:
            if not spool.fits(size + len(memory[0][0]) + 1):
                break
            chunk.append(memory.popleft())
            size += len(chunk[-1][0]) + 1
        if chunk and self._spill(chunk):
            self._memory_bytes -= size - len(chunk)
        else:
            memory.extendleft(reversed(chunk))  # the disk refused: keep them in memory

    def _spill(self, items: list[_Item]) -> bool:
        """Append ``items`` to the spool; False (nothing written) without a spool or room."""
        spool = self._spool
        if spool is None or not spool.fits(sum(len(data) + 1 for data, _ in items)):
            return False
        try:
            spool.append([data for data, _ in items])
        except OSError as exc:
            _log.warning("dispatcher_client: spool write failed (%s)", exc.strerror)
            return False
        self.stats.spooled += len(items)
        _settle(items)
        self.stats.buffered = len(self._memory)
        self.stats.spool_pending_bytes = spool.pending_bytes
        return True

    async def _sync_loop(self) -> None:
        assert self._spool is not None
        while True:
            await asyncio.sleep(self._config.fsync_interval_s)
            await asyncio.to_thread(self._spool.sync)

    async def _run(self) -> None:
        while True:
            try:
                await self._loop()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the sender die: log, back off, carry on
                _log.exception("dispatcher_client: sender error")
                self._memory.extendleft(reversed(self._current))  # nothing is lost
                self._memory_bytes += sum(len(data) for data, _ in self._current)
                self._current = []
                await asyncio.sleep(self._config.backoff_max_s)

    async def _loop(self) -> None:
        config = self._config
        while True:
            spool = self._spool
            if spool is not None and spool.pending:
                lines, position = spool.peek(config.max_batch_events, config.max_batch_bytes)
                await self._deliver([(line, None) for line in lines])
                spool.commit(position)
                self.stats.spool_pending_bytes = spool.pending_bytes
            elif self._memory:
                self._current = self._take()
                await self._deliver(self._current)
                self._current = []
            else:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                if len(self._memory) < config.max_batch_events and config.linger_s > 0:
                    await asyncio.sleep(config.linger_s)

    def _take(self) -> list[_Item]:
        """The next batch: at most ``max_batch_events`` and ``max_batch_bytes`` (at least one event)."""
        batch: list[_Item] = []
        size = 0
        memory = self._memory
        while memory and len(batch) < self._config.max_batch_events:
            if batch and size + len(memory[0][0]) > self._config.max_batch_bytes:
                break
            batch.append(memory.popleft())
            size += len(batch[-1][0]) + 1
        self._memory_bytes -= size - len(batch)
        self.stats.buffered = len(memory)
        return batch

    async def _deliver(self, batch: list[_Item]) -> None:
        """Deliver ``batch`` in order, retrying until it is acknowledged or refused."""
        attempt = restarts = 0
        while True:
            outcome = await self._post(batch)
            if outcome == "ok":
                return
            if outcome == "unknown_run" and self.run_started is not None and restarts < 3:
                await self._deliver([(self.run_started, None)])
                restarts += 1
                self.stats.retried += len(batch)
                continue
            if outcome == "unknown_run" and self.run_started is None and attempt < _UNKNOWN_RUN_WAITS:
                outcome = "retry"  # another client (the follower, the dispatcher) may start it soon
            if outcome in ("refused", "unknown_run"):  # the same for every event: no bisecting
                self.stats.rejected += len(batch)
                _settle(batch)
                _log.warning("dispatcher_client: %d event(s) refused: %s", len(batch), self.stats.last_error)
                return
            if outcome == "invalid":
                if len(batch) == 1:
                    self.stats.rejected += 1
                    _settle(batch)
                    _log.warning("dispatcher_client: sidecar refused an event: %s", self.stats.last_error)
                    return
                half = len(batch) // 2
                await self._deliver(batch[:half])
                await self._deliver(batch[half:])
                return
            self.stats.retried += len(batch)
            delay = min(self._config.backoff_max_s, self._config.backoff_initial_s * (2**attempt))
            attempt += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _post(self, batch: list[_Item]) -> str:
        """One request: ``ok``, ``retry``, ``invalid`` (bisect), ``refused`` (401/403) or ``unknown_run``."""
        stats = self.stats
        stats.requests += 1
        body = b"[" + b",".join(data for data, _ in batch) + b"]"
        try:
            response = await self._http.post(self._path, content=body, headers=self._headers)
        except httpx.HTTPError as exc:
            stats.failed_requests += 1
            stats.connected = False
            stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return "retry"
        status = response.status_code
        if status == 200:
            try:
                results = orjson.loads(response.content)["results"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                stats.failed_requests += 1
                stats.last_error = f"HTTP 200 with an unexpected body: {response.text[:300]}"
                return "retry"
            stats.connected = True
            stats.sent += len(batch)
            stats.duplicates += sum(1 for result in results if result.get("status") == "duplicate")
            _settle(batch, results)
            return "ok"
        stats.failed_requests += 1
        stats.last_error = f"HTTP {status}: {response.text[:300]}"
        stats.connected = status < 500 and status not in _RETRYABLE
        if not stats.connected:
            return "retry"
        if status == 404 and b"unknown_run" in response.content:
            return "unknown_run"
        return "refused" if status in (401, 403) else "invalid"
