"""``SyncSidecarClient``: the same client for dispatchers that are not async.

A background thread runs an event loop with one :class:`SidecarClient` on it, and this class is a
facade over that client (its source, sequence, local tracker, stats and fallback rules). Event
calls build a small dict and append it to a deque: the caller's thread does no encoding, no I/O
and no system call. The loop collects the deque every ``handoff_interval_s`` (earlier only when a
full batch waits), since waking it per event would write to its self-pipe and hand the GIL to the
background thread in the middle of the dispatcher's work. Reads block until the loop answers or
their timeout passes.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from sidecar.wire import EventKind

from .client import ClientClosed, SidecarClient, SidecarError, latency_event, run_ended_event
from .config import ClientConfig, ClientStats

__all__ = ["SyncSidecarClient"]

T = TypeVar("T")
_Latency = tuple[str, float | None, str, int, float]


class SyncSidecarClient:
    """Thread-safe, blocking-free facade: ``with SyncSidecarClient(url, run_id=...) as c: ...``.

    ``token`` and ``transport`` as :class:`SidecarClient`'s; :attr:`core` is the client it drives.
    """

    def __init__(self, base_url: str, *, run_id: str, token: str | None = None,
                 config: ClientConfig | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.core = SidecarClient(base_url, run_id=run_id, token=token, config=config, transport=transport)
        self.base_url, self.run_id, self.config = self.core.base_url, run_id, self.core.config
        self.local, self.source, self.next_number = self.core.local, self.core.source, self.core.next_number
        # API event dicts, or latency tuples (cheaper to make on the caller's thread).
        self._pending: deque[Mapping[str, Any] | _Latency] = deque()
        self._scheduled = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sidecar-client", daemon=True)
        self._thread.start()
        self._closed = False
        self._poller: asyncio.Task[None] | None = None
        self._call(self._open(), timeout_s=10.0)
        atexit.register(self.close)

    @property
    def stats(self) -> ClientStats:
        return self.core.stats

    async def _open(self) -> None:
        await self.core.open()
        self._poller = asyncio.get_running_loop().create_task(self._collect())

    async def _collect(self) -> None:
        while True:
            await asyncio.sleep(self.config.handoff_interval_s)
            if self._pending:
                self._pump()

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        if self._loop.is_closed():
            coro.close()
            name = type(self).__name__
            raise ClientClosed(f"{name} is not open: use it as a context manager, or open it first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    # -- hand-over ------------------------------------------------------------------------

    def submit_event(self, event: Mapping[str, Any] | _Latency) -> None:
        """Queue one API event from any thread; returns in about a microsecond."""
        if self._closed:  # fail open: a tracker used after close still answers locally
            self.stats.dropped += 1
            return
        pending = self._pending
        pending.append(event)
        if len(pending) >= self.config.max_batch_events and not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._pump)
            except RuntimeError:  # the loop closed under us (interpreter exit)
                self.stats.dropped += len(pending)
                pending.clear()

    def submit_latency(self, op: str, seconds: float | None, source: str, seq: int) -> None:
        """Queue one ``latency`` event (``RemoteLatencyTracker``), stamped now; built on the loop."""
        self.submit_event((op, seconds, source, seq, self.config.clock()))

    def _pump(self) -> None:
        self._scheduled = False  # before popping: an append that saw True is popped below
        pending, core = self._pending, self.core
        while pending:
            item = pending.popleft()
            core.submit_event(latency_event(*item) if isinstance(item, tuple) else item)

    # -- events ---------------------------------------------------------------------------

    def start_run(self, *, plan: Mapping[Any, int] | None = None, dispatch_budget_s: float | None = None,
                  drain_margin_s: float | None = None, materialized_inputs: str | None = None,
                  tracking: Mapping[str, str] | None = None, **fields: Any) -> None:
        """As :meth:`SidecarClient.start_run`."""
        self.submit_event(self.core.build_run_started(plan, dispatch_budget_s, drain_margin_s,
                                                      materialized_inputs, tracking, fields))

    def completed(self, row: Mapping[str, Any] | None, result: Mapping[str, Any], *, seconds: float,
                  latency_ms: float | None = None, wait: bool = True) -> dict[str, Any] | None:
        """Report a completion; returns its ``ng_perf`` (the sidecar's, or built locally)."""
        core = self.core
        event = core.build_completed(row, result, seconds, latency_ms)
        if not wait or not core.stats.connected:
            self.submit_event(event)
            return core.local_ng_perf(result, seconds, latency_ms)

        async def ask() -> dict[str, Any] | None:
            self._pump()  # earlier hand-overs first: order is preserved
            return await core.deliver_completion(event, result, seconds, latency_ms, wait=True)

        return self._call(ask(), None)

    def failed(self, row: Mapping[str, Any] | None, failure_row: Mapping[str, Any], *,
               seconds: float | None = None) -> None:
        self.submit_event(self.core.build_failed(row, failure_row, seconds))

    def drained(self, row: Mapping[str, Any] | None, result: Mapping[str, Any] | None = None) -> None:
        self.submit_event(self.core.build_drained(row, result))

    def started(self, row: Mapping[str, Any] | None) -> None:
        event = self.core.build_progress(EventKind.STARTED, row)
        if event is not None:
            self.submit_event(event)

    def heartbeat(self, row: Mapping[str, Any] | None) -> None:
        event = self.core.build_progress(EventKind.HEARTBEAT, row)
        if event is not None:
            self.submit_event(event)

    def run_ended(self) -> None:
        self.submit_event(run_ended_event(ended_at=self.config.clock()))

    # -- reads and lifecycle --------------------------------------------------------------

    def drain_margin(self, configured: float | None = None, *, timeout_s: float = 0.5,
                     strict: bool = False) -> float | None:
        """As :meth:`SidecarClient.drain_margin`: falls back to the local tracker."""
        core, now = self.core, time.monotonic()
        if not core.ask_sidecar(now, strict):
            return core.local_drain_margin(configured)
        try:
            asked = core.drain_margin(configured, timeout_s=timeout_s, strict=True)
            return self._call(asked, timeout_s + 1.0)
        except ClientClosed:
            raise
        except (SidecarError, concurrent.futures.TimeoutError):
            if strict:
                raise
            return core.local_drain_margin(configured, now)

    def report(self, *, timeout_s: float = 30.0) -> dict[str, Any]:
        """As :meth:`SidecarClient.report`."""
        return self._call(self.core.report(timeout_s=timeout_s), timeout_s + 1.0)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Block until everything handed over so far is acknowledged; False on timeout."""

        async def flush() -> bool:
            self._pump()
            return await self.core.flush(timeout_s)

        return self._call(flush(), None)

    def close(self, timeout_s: float | None = None) -> None:
        """Deliver what is buffered (up to ``timeout_s``, default ``close_timeout_s``), stop the thread."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)

        async def close() -> None:
            if self._poller is not None:
                self._poller.cancel()
            self._pump()
            await self.core.aclose(timeout_s)

        try:
            self._call(close(), None)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
            self._loop.close()

    def __enter__(self) -> SyncSidecarClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
