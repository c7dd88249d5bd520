"""``SyncSidecarClient``: the same client for dispatchers that are not async.

A background thread runs its own event loop with a :class:`SidecarClient` on it, and the sync
client is a facade over that one client: its source, sequence, local tracker, stats and
fallback rules are the async client's (``ClientCore``), never a second copy. Event
calls build a small dict and append it to a deque: the caller's thread does no encoding, no
network I/O and no system call. The loop collects the deque every ``handoff_interval_s``
(and is woken early only when a full batch is waiting), because waking it per event would
make the caller's thread write to the loop's self-pipe, releasing the GIL to the background
thread in the middle of the dispatcher's work. Reads (``drain_margin``, ``report``) block
the caller until the loop answers or their timeout passes.
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

from sidecar.perf import DispatchLatencyTracker
from sidecar.wire import EventNumber

from ._core import ClientClosed, SidecarError, renamed_timeout
from ._events import latency_event
from .client import SidecarClient
from .config import ClientConfig, ClientStats

__all__ = ["SyncSidecarClient"]

T = TypeVar("T")


class SyncSidecarClient:
    """Thread-safe, blocking-free facade: ``with SyncSidecarClient(url, run_id=...) as c: ...``.

    ``token`` and ``transport`` as :class:`SidecarClient`'s: ``None`` reads
    ``$ROLLOUT_SIDECAR_TOKEN``; the transport serves the background thread's async client,
    which is this facade's one core (:attr:`core`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        run_id: str,
        token: str | None = None,
        config: ClientConfig | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._client = SidecarClient(base_url, run_id=run_id, token=token, config=config, transport=transport)
        # API event dicts, or (op, seconds, source, seq) tuples of latency events (cheaper to make).
        self._pending: deque[Mapping[str, Any] | tuple[str, float | None, str, int, float]] = deque()
        self._scheduled = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sidecar-client", daemon=True)
        self._thread.start()
        self._closed = False
        self._wake_at = self.config.max_batch_events
        self._poller: asyncio.Task[None] | None = None
        self._call(self._open(), timeout_s=10.0)
        atexit.register(self.close)

    # -- the one core ---------------------------------------------------------------------

    @property
    def core(self) -> SidecarClient:
        """The async client this facade drives: its identity, tracker and stats are this one's."""
        return self._client

    @property
    def base_url(self) -> str:
        return self._client.base_url

    @property
    def run_id(self) -> str:
        return self._client.run_id

    @property
    def config(self) -> ClientConfig:
        return self._client.config

    @property
    def stats(self) -> ClientStats:
        return self._client.stats

    @property
    def local(self) -> DispatchLatencyTracker:
        """The local tracker of this client's own events (the core's)."""
        return self._client.local

    @property
    def source(self) -> str:
        """This client's name in event identities (the core's)."""
        return self._client.source

    def next_number(self) -> EventNumber:
        """A fresh ``(source, seq)`` from the core's one sequence."""
        return self._client.next_number()

    def _closed_error(self) -> ClientClosed:
        return ClientClosed(
            f"{type(self).__name__} is not open: use it as a context manager, or open it first"
        )

    async def _open(self) -> None:
        await self._client.open()
        self._poller = asyncio.get_running_loop().create_task(self._collect())

    async def _collect(self) -> None:
        interval = self.config.handoff_interval_s
        while True:
            await asyncio.sleep(interval)
            if self._pending:
                self._pump()

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        if self._loop.is_closed():
            coro.close()
            raise self._closed_error()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    # -- hand-over ------------------------------------------------------------------------

    def submit_event(self, event: Mapping[str, Any]) -> None:
        """Queue one raw API event from any thread; returns in about a microsecond."""
        if self._closed:  # fail open: a tracker used after close still answers locally
            self._client.stats.dropped += 1
            return
        pending = self._pending
        pending.append(event)
        if len(pending) >= self._wake_at and not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._pump)
            except RuntimeError:  # the loop closed under us (interpreter exit)
                self._client.stats.dropped += len(self._pending)
                self._pending.clear()

    def submit_latency(self, op: str, seconds: float | None, source: str, seq: int) -> None:
        """Queue one ``latency`` event (``RemoteLatencyTracker``) stamped now; the dict is built
        on the loop."""
        if self._closed:
            self._client.stats.dropped += 1
            return
        pending = self._pending
        pending.append((op, seconds, source, seq, self._client.config.clock()))
        if len(pending) >= self._wake_at and not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._pump)
            except RuntimeError:
                self._client.stats.dropped += len(pending)
                pending.clear()

    def _pump(self) -> None:
        self._scheduled = False  # before popping: an append that saw True is popped below
        pending = self._pending
        client = self._client
        while pending:
            item = pending.popleft()
            if isinstance(item, tuple):
                client.submit_event(latency_event(*item))
            else:
                client.submit_event(item)

    # -- events ---------------------------------------------------------------------------

    def start_run(
        self,
        *,
        plan: Mapping[Any, int] | None = None,
        dispatch_budget_s: float | None = None,
        drain_margin_s: float | None = None,
        materialized_inputs: str | None = None,
        tracking: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> None:
        """As :meth:`SidecarClient.start_run`."""
        if tracking is not None:  # {"mlflow_run_id": ..., "wandb_run_path": ...}: runs to log into
            fields = {**fields, "tracking": dict(tracking)}
        self.submit_event(
            self._client._run_started(plan, dispatch_budget_s, drain_margin_s, materialized_inputs, fields)
        )

    def completed(
        self,
        row: Mapping[str, Any] | None,
        result: Mapping[str, Any],
        *,
        seconds: float,
        latency_ms: float | None = None,
        wait: bool = True,
    ) -> dict[str, Any] | None:
        """Report a completion; returns its ``ng_perf`` (the sidecar's, or built locally)."""
        client = self._client
        event = client._completion(row, result, seconds, latency_ms)
        if not wait or not client.stats.connected:
            self.submit_event(event)
            return client._local_ng_perf(result, seconds, latency_ms)

        async def ask() -> dict[str, Any] | None:
            self._pump()  # earlier hand-overs first: order is preserved
            return await client.deliver_completion(event, result, seconds, latency_ms, wait=True)

        return self._call(ask(), None)

    def failed(
        self, row: Mapping[str, Any] | None, failure_row: Mapping[str, Any], *, seconds: float | None = None
    ) -> None:
        """As :meth:`SidecarClient.failed`."""
        self.submit_event(self._client._failure(row, failure_row, seconds))

    def drained(self, row: Mapping[str, Any] | None, result: Mapping[str, Any] | None = None) -> None:
        """As :meth:`SidecarClient.drained`."""
        self.submit_event(self._client._drain(row, result))

    def started(self, row: Mapping[str, Any] | None) -> None:
        """As :meth:`SidecarClient.started`."""
        self._progress("started", row)

    def heartbeat(self, row: Mapping[str, Any] | None) -> None:
        """As :meth:`SidecarClient.heartbeat`."""
        self._progress("heartbeat", row)

    def _progress(self, kind: str, row: Mapping[str, Any] | None) -> None:
        event = self._client._progress(kind, row)
        if event is not None:
            self.submit_event(event)

    def run_ended(self) -> None:
        self.submit_event(self._client._ended())

    # -- reads and lifecycle --------------------------------------------------------------

    def drain_margin(
        self,
        configured: float | None = None,
        *,
        timeout_s: float | None = None,
        strict: bool = False,
        timeout: float | None = None,
    ) -> float | None:
        """As :meth:`SidecarClient.drain_margin` (``timeout_s`` default 0.5; ``timeout`` is its
        deprecated name): falls back to this facade's local tracker."""
        wait_s = renamed_timeout(timeout_s, timeout, 0.5)
        assert wait_s is not None
        core = self._client
        now = time.monotonic()
        if core._ask_sidecar(now, strict):
            try:
                return self._call(
                    self._client.drain_margin(configured, timeout_s=wait_s, strict=True), wait_s + 1.0
                )
            except ClientClosed:
                raise
            except (SidecarError, concurrent.futures.TimeoutError):
                if strict:
                    raise
                core._sidecar_unanswered(now)
        return core._local_drain_margin(configured)

    def report(self, *, timeout_s: float | None = None, timeout: float | None = None) -> dict[str, Any]:
        """As :meth:`SidecarClient.report` (``timeout_s`` default 30; ``timeout``: deprecated name)."""
        wait_s = renamed_timeout(timeout_s, timeout, 30.0)
        assert wait_s is not None
        return self._call(self._client.report(timeout_s=wait_s), wait_s + 1.0)

    def flush(self, timeout_s: float | None = None, *, timeout: float | None = None) -> bool:
        """Block until everything handed over so far is acknowledged; False on timeout."""
        wait_s = renamed_timeout(timeout_s, timeout, None)

        async def flush() -> bool:
            self._pump()
            return await self._client.flush(wait_s)

        return self._call(flush(), None)

    def close(self, timeout_s: float | None = None, *, timeout: float | None = None) -> None:
        """Deliver what is buffered (up to ``close_timeout_s``), then stop the thread."""
        if self._closed:
            return
        wait_s = renamed_timeout(timeout_s, timeout, None)
        self._closed = True
        atexit.unregister(self.close)

        async def close() -> None:
            if self._poller is not None:
                self._poller.cancel()
            self._pump()
            await self._client.aclose(wait_s)

        try:
            self._call(close(), None)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
            self._loop.close()

    def __enter__(self) -> SyncSidecarClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
