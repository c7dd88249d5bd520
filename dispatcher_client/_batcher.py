"""The background sender: a FIFO of encoded events, batched, retried, spilled, never blocking.

Order is one logical queue: the batch in flight, then the spool (older), then memory
(newer). Spilling moves all of memory to the end of the spool, so that order holds;
batches are taken from the spool first. Submitting never awaits: past the in-memory limit
events spill to the spool, past the spool limit (or without one) the new event is dropped
and counted. A failed request is retried with exponential backoff and jitter until it is
delivered; the sidecar's idempotency keys make a retried event a duplicate, never a second
count. A batch the sidecar rejects as invalid is bisected so one bad event cannot hold the
others back; an ``unknown_run`` answer (a sidecar with a fresh journal) re-sends the run's
``run_started`` first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx
import orjson

from ._spool import Spool
from .config import ClientConfig, ClientStats

__all__ = ["Batcher", "Delivery"]

_log = logging.getLogger("dispatcher_client")
_SPILL_CHUNK_BYTES = 1 << 20
#: Backoff rounds (about 10 s at the defaults) a client that does not start the run itself
#: waits for someone else to start it before its events are rejected as for an unknown run.
_UNKNOWN_RUN_WAITS = 8
_RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class Delivery(Enum):
    """What one POST of a batch came to."""

    OK = "ok"  # acknowledged, every event settled
    RETRY = "retry"  # unreachable, overloaded or garbled: send the same batch again later
    INVALID = "invalid"  # refused for its content (or size): bisect down to the refused event
    REFUSED = "refused"  # refused for every event alike (401/403): drop the batch
    UNKNOWN_RUN = "unknown_run"  # the run is not (yet) started there


@dataclass(slots=True)
class _Item:
    data: bytes
    future: asyncio.Future[dict[str, Any] | None] | None = None


def _settle(items: list[_Item], results: list[dict[str, Any] | None] | None = None) -> None:
    for index, item in enumerate(items):
        future = item.future
        if future is not None and not future.done():
            future.set_result(results[index] if results is not None else None)


class Batcher:
    """Owns delivery of one run's events over a shared ``httpx.AsyncClient``."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        run_id: str,
        config: ClientConfig,
        stats: ClientStats,
        *,
        headers: dict[str, str],
    ) -> None:
        self._http = http
        self._path = f"/v1/runs/{run_id}/events"
        self._config = config
        self.stats = stats
        self._headers = {"content-type": "application/json", **headers}
        self._memory: deque[_Item] = deque()
        self._memory_bytes = 0
        self._inflight = 0
        self._current: list[_Item] = []
        self._spool = (
            Spool(
                config.spool_dir,
                run_id,
                max_bytes=config.spool_max_bytes,
                fsync_always=config.fsync == "always",
            )
            if config.spool_dir is not None
            else None
        )
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self.run_started: bytes | None = None
        self._task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._update_idle()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sidecar-client-sender")
        if self._spool is not None and self._config.fsync == "interval":
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    async def close(self, timeout_s: float) -> None:
        """Try to deliver everything for ``timeout_s`` s; spool or drop (and count) the rest."""
        delivered = await self.flush(timeout_s)
        for task in (self._task, self._sync_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not delivered:
            leftovers = [*self._current, *self._memory]
            self._current = []
            self._memory.clear()
            self._memory_bytes = 0
            if leftovers and not self._spill(leftovers):
                self.stats.dropped += len(leftovers)
                _settle(leftovers)
                _log.warning("dispatcher_client: closed with %d undelivered event(s)", len(leftovers))
        if self._spool is not None:
            self._spool.close()
        self._update_idle()

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted event is acknowledged (or dropped); False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    # -- submitting (never awaits) --------------------------------------------------------

    def submit(self, data: bytes, future: asyncio.Future[dict[str, Any] | None] | None = None) -> None:
        """Queue one encoded event; ``future`` gets its per-event result (``None`` if not known)."""
        stats = self.stats
        stats.submitted += 1
        item = _Item(data, future)
        if self._over(len(data)):
            self._spill_oldest()
            if self._over(len(data)):
                if self._memory or not self._spill([item]):
                    self._drop(item)
                    return
                self._idle.clear()  # larger than the memory bound alone: it went to the spool
                self._wake.set()
                return
        self._memory.append(item)
        self._memory_bytes += len(data)
        stats.buffered = len(self._memory)
        self._idle.clear()
        self._wake.set()

    def _over(self, size: int) -> bool:
        config = self._config
        return (
            len(self._memory) >= config.max_buffered_events
            or self._memory_bytes + size > config.max_buffered_bytes
        )

    def _drop(self, item: _Item) -> None:
        _settle([item])
        self.stats.dropped += 1
        dropped = self.stats.dropped
        if dropped == 1 or dropped % 1000 == 0:
            _log.warning("dispatcher_client: buffer full, %d event(s) dropped so far", dropped)

    def _spill_oldest(self) -> None:
        """Move the oldest events (about 1 MiB, at least one) from memory to the spool's end.

        The spool only ever holds events older than memory's, so order holds; each spill is a
        bounded write, so the caller's loop never stalls on a large one.
        """
        spool = self._spool
        memory = self._memory
        if spool is None or not memory:
            return
        chunk: list[_Item] = []
        size = 0
        while memory and size < _SPILL_CHUNK_BYTES and len(chunk) < self._config.max_batch_events:
            head = memory[0]
            if not spool.fits(size + len(head.data) + 1):
                break
            chunk.append(memory.popleft())
            size += len(head.data) + 1
        if not chunk:
            return
        self._memory_bytes -= size - len(chunk)
        if not self._spill(chunk):
            memory.extendleft(reversed(chunk))  # the disk refused: keep them in memory
            self._memory_bytes += size - len(chunk)

    def _spill(self, items: list[_Item]) -> bool:
        """Append ``items`` to the spool; False (nothing written) without a spool or room."""
        spool = self._spool
        if spool is None or not spool.fits(sum(len(item.data) + 1 for item in items)):
            return False
        try:
            spool.append([item.data for item in items])
        except OSError as exc:
            _log.warning("dispatcher_client: spool write failed (%s)", exc.strerror)
            return False
        self.stats.spooled += len(items)
        _settle(items)
        self.stats.buffered = len(self._memory)
        self.stats.spool_pending_bytes = spool.pending_bytes
        return True

    def _update_idle(self) -> None:
        spool_pending = self._spool is not None and self._spool.pending
        if not self._memory and not self._inflight and not spool_pending:
            self._idle.set()
        else:
            self._idle.clear()

    # -- sending --------------------------------------------------------------------------

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
                if self._current:  # put the batch back at the head: nothing is lost
                    self._memory.extendleft(reversed(self._current))
                    self._memory_bytes += sum(len(item.data) for item in self._current)
                    self._current = []
                self._inflight = 0
                await asyncio.sleep(self._config.backoff_max_s)

    async def _loop(self) -> None:
        config = self._config
        while True:
            self._update_idle()
            spool = self._spool
            if spool is not None and spool.pending:
                lines, position = spool.peek(config.max_batch_events, config.max_batch_bytes)
                self._inflight = len(lines)
                await self._deliver([_Item(line) for line in lines])
                spool.commit(position)
                self.stats.spool_pending_bytes = spool.pending_bytes
                self._inflight = 0
                continue
            if not self._memory:
                self._wake.clear()
                await self._wake.wait()
                if len(self._memory) < config.max_batch_events and config.linger_s > 0:
                    await asyncio.sleep(config.linger_s)
                continue
            batch = self._take()
            self._inflight = len(batch)
            self._current = batch
            await self._deliver(batch)
            self._current = []
            self._inflight = 0

    def _take(self) -> list[_Item]:
        config = self._config
        batch: list[_Item] = []
        size = 0
        memory = self._memory
        while memory and len(batch) < config.max_batch_events:
            item = memory[0]
            if batch and size + len(item.data) > config.max_batch_bytes:
                break
            memory.popleft()
            batch.append(item)
            size += len(item.data) + 1
        self._memory_bytes -= sum(len(item.data) for item in batch)
        self.stats.buffered = len(memory)
        return batch

    async def _deliver(self, batch: list[_Item]) -> None:
        """Deliver ``batch`` in order, retrying until it is acknowledged or refused."""
        attempt = restarts = 0
        while True:
            outcome = await self._post(batch)
            if outcome is Delivery.OK:
                return
            if outcome is Delivery.UNKNOWN_RUN and self.run_started is not None and restarts < 3:
                await self._deliver([_Item(self.run_started)])
                restarts += 1
                self.stats.retried += len(batch)
                continue
            if outcome is Delivery.UNKNOWN_RUN and self.run_started is None and attempt < _UNKNOWN_RUN_WAITS:
                outcome = Delivery.RETRY  # another client (the follower, the dispatcher) may start it soon
            if outcome in (Delivery.REFUSED, Delivery.UNKNOWN_RUN):  # the same for every event: no bisecting
                self.stats.rejected += len(batch)
                _settle(batch)
                _log.warning("dispatcher_client: %d event(s) refused: %s", len(batch), self.stats.last_error)
                return
            if outcome is Delivery.INVALID:
                if len(batch) > 1:
                    half = len(batch) // 2
                    await self._deliver(batch[:half])
                    await self._deliver(batch[half:])
                else:
                    self.stats.rejected += 1
                    _settle(batch)
                return
            self.stats.retried += len(batch)
            delay = min(self._config.backoff_max_s, self._config.backoff_initial_s * (2**attempt))
            attempt += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _post(self, batch: list[_Item]) -> Delivery:
        """One request, and what it means for the batch."""
        body = b"[" + b",".join(item.data for item in batch) + b"]"
        stats = self.stats
        stats.requests += 1
        try:
            response = await self._http.post(self._path, content=body, headers=self._headers)
        except httpx.HTTPError as exc:
            stats.failed_requests += 1
            stats.connected = False
            stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return Delivery.RETRY
        status = response.status_code
        if status == 200:
            try:
                results = orjson.loads(response.content)["results"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                stats.failed_requests += 1
                stats.last_error = f"HTTP 200 with an unexpected body: {response.text[:300]}"
                return Delivery.RETRY
            stats.connected = True
            stats.sent += len(batch)
            stats.duplicates += sum(1 for result in results if result.get("status") == "duplicate")
            _settle(batch, results)
            return Delivery.OK
        stats.failed_requests += 1
        stats.last_error = f"HTTP {status}: {response.text[:300]}"
        if status in _RETRYABLE or status >= 500:
            stats.connected = False
            return Delivery.RETRY
        stats.connected = True
        if status == 404 and b"unknown_run" in response.content:
            return Delivery.UNKNOWN_RUN
        if status in (401, 403):
            return Delivery.REFUSED
        if status == 413 and len(batch) > 1:
            return Delivery.INVALID  # bisected like an invalid batch: halves fit
        if len(batch) == 1:
            _log.warning("dispatcher_client: sidecar refused an event: %s", stats.last_error)
        return Delivery.INVALID
