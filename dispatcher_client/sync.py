"""The synchronous faces of the client: ``SyncSidecarClient`` and ``RemoteLatencyTracker``.

Event calls only append to a deque, collected by a background loop every ``handoff_interval_s``:
waking that thread per event would hand it the GIL mid-dispatch.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import threading
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from sidecar.perf import DispatchLatencyTracker
from sidecar.wire import EventKind, LatencyOp, source_id

from .client import ClientClosed, SidecarClient, SidecarError, latency_event, run_ended_event
from .config import ClientConfig, ClientStats

__all__ = ["RemoteLatencyTracker", "SyncSidecarClient"]

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
        self._progress(EventKind.STARTED, row)

    def heartbeat(self, row: Mapping[str, Any] | None) -> None:
        self._progress(EventKind.HEARTBEAT, row)

    def _progress(self, kind: EventKind, row: Mapping[str, Any] | None) -> None:
        if (event := self.core.build_progress(kind, row)) is not None:
            self.submit_event(event)

    def run_ended(self) -> None:
        self.submit_event(run_ended_event(ended_at=self.config.clock()))

    def drain_margin(self, configured: float | None = None, *, timeout_s: float = 0.5,
                     strict: bool = False) -> float | None:
        """As :meth:`SidecarClient.drain_margin`: falls back to the local tracker."""
        core, now = self.core, time.monotonic()
        if not core.ask_sidecar(now, strict):  # no thread hop while the sidecar is down
            return core.local_drain_margin(configured)
        try:
            asked = core.drain_margin(configured, timeout_s=timeout_s, strict=strict)
            return self._call(asked, timeout_s + 1.0)
        except concurrent.futures.TimeoutError:  # the client's loop is stuck
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


class RemoteLatencyTracker:
    """NeMo Gym's ``DispatchLatencyTracker`` interface: a local tracker answers, each call also goes as
    a ``latency`` event; ``pooled``: ``drain_margin`` is the run's p75 over every process."""

    def __init__(self, base_url: str | None = None, *, run_id: str | None = None, token: str | None = None,
                 client: SyncSidecarClient | None = None, config: ClientConfig | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 local: DispatchLatencyTracker | None = None, start_run: bool = True, pooled: bool = False,
                 pooled_interval_s: float = 1.0, **run_fields: Any) -> None:
        self._owns_client = client is None
        if client is None:
            if base_url is None or run_id is None:
                raise ValueError("RemoteLatencyTracker needs base_url and run_id, or a client")
            client = SyncSidecarClient(base_url, run_id=run_id, token=token, config=config,
                                       transport=transport)
        self.client = client
        self.local = local if local is not None else DispatchLatencyTracker()
        self.source = source_id()
        self._seq = itertools.count()
        #: The sidecar's last answer for the whole run, ``(drain margin, samples)``; ``None``: none.
        self.pooled: tuple[float | None, int] | None = None
        self._poller: concurrent.futures.Future[None] | None = None
        if pooled:
            self._poller = asyncio.run_coroutine_threadsafe(self._poll(pooled_interval_s), client._loop)
        if start_run:
            client.start_run(**run_fields)

    def record(self, seconds: float) -> None:
        self.local.record(seconds)
        self.client.submit_latency(LatencyOp.RECORD.value, seconds, self.source, next(self._seq))

    def record_failure(self, seconds: float) -> None:
        self.local.record_failure(seconds)
        self.client.submit_latency(LatencyOp.RECORD_FAILURE.value, seconds, self.source, next(self._seq))

    def record_drained(self) -> None:
        self.local.record_drained()
        self.client.submit_latency(LatencyOp.RECORD_DRAINED.value, None, self.source, next(self._seq))

    def drain_margin(self, configured: float | None) -> float | None:
        pooled = self.pooled
        if configured is None and pooled is not None:
            return pooled[0]
        return self.local.drain_margin(configured)

    async def _fetch(self) -> None:
        try:
            body = await self.client.core.drain_margin_info(None, timeout_s=0.5)
            margin = body.get("drain_margin")
            self.pooled = (None if margin is None else float(margin), int(body.get("samples") or 0))
        except (SidecarError, TypeError, ValueError):
            self.pooled = None  # unreachable, unknown run (not started yet) or a bad answer: local

    async def _poll(self, interval_s: float) -> None:
        while True:
            await self._fetch()
            await asyncio.sleep(interval_s)

    def refresh(self) -> None:
        """Fetch the pooled margin now (blocks up to about a second; ``pooled`` is ``None`` after)."""
        try:
            asyncio.run_coroutine_threadsafe(self._fetch(), self.client._loop).result(2.0)
        except (concurrent.futures.TimeoutError, RuntimeError):  # a stuck or closed loop: local answers
            self.pooled = None

    @property
    def _durations(self) -> list[float]:
        """The seed API documents ``_durations`` / ``_drained``: read-only views of the local tracker."""
        return self.local.samples()

    @property
    def _drained(self) -> int:
        return self.local.drained

    def __getattr__(self, name: str) -> Any:
        # drained, quantile(), summary(), count, percentiles(), ...: the local tracker's.
        if name.startswith("__") or name in ("local", "client"):
            raise AttributeError(name)
        return getattr(self.local, name)

    @property
    def stats(self) -> ClientStats:
        return self.client.stats

    def flush(self, timeout_s: float | None = None) -> bool:
        """As :meth:`SyncSidecarClient.flush`."""
        return self.client.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Deliver what is buffered and stop the background thread (if this tracker owns it)."""
        if self._poller is not None:
            self._poller.cancel()
        if self._owns_client:
            self.client.close(timeout_s)

    def __enter__(self) -> RemoteLatencyTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
