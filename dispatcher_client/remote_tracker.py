"""``RemoteLatencyTracker``: a drop-in ``DispatchLatencyTracker`` that also feeds the sidecar.

NeMo Gym calls ``record`` / ``record_failure`` / ``record_drained`` and reads ``drain_margin``
synchronously on its event loop, so each method updates a local :class:`DispatchLatencyTracker`
(which answers exactly what the in-process tracker would, sidecar or not) and hands a tuple to a
:class:`SyncSidecarClient`'s thread. The tracker API carries no rollout identity: each call goes as a
``latency`` event (``op``, ``seconds``, and ``source``/``seq`` naming this tracker and counting its
calls, the idempotency key), which feeds the run's tracker only, never its accounting or health.

``pooled=True`` (several dispatcher processes of one run): ``drain_margin`` answers the run's p75
over every process's samples, pooled in the sidecar (never an average of per-process p75s), fetched
in the background every ``pooled_interval_s``; while the sidecar does not answer, the local one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from types import TracebackType
from typing import Any

import httpx

from sidecar.perf import DispatchLatencyTracker
from sidecar.wire import LatencyOp, source_id

from .client import SidecarError
from .config import ClientConfig, ClientStats
from .sync import SyncSidecarClient

__all__ = ["RemoteLatencyTracker"]


class RemoteLatencyTracker:
    """``latency_tracker=RemoteLatencyTracker("http://127.0.0.1:9400", run_id="run-7")``.

    ``token`` and ``transport`` as :class:`SidecarClient`'s: ``None`` reads ``$ROLLOUT_SIDECAR_TOKEN``.
    ``drain_margin(configured)`` takes its argument as NeMo Gym's tracker does (``None``: adaptive).
    """

    def __init__(self, base_url: str | None = None, *, run_id: str | None = None, token: str | None = None,
                 client: SyncSidecarClient | None = None, config: ClientConfig | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 local: DispatchLatencyTracker | None = None, start_run: bool = True, pooled: bool = False,
                 pooled_interval_s: float = 1.0,
                 **run_fields: Any) -> None:
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

    # -- the DispatchLatencyTracker interface ------------------------------------------------

    def record(self, seconds: float) -> None:
        self.local.record(seconds)
        self.client.submit_latency(LatencyOp.RECORD.value, seconds, self.source, next(self._seq))

    def record_failure(self, seconds: float) -> None:
        self.local.record_failure(seconds)
        self.client.submit_latency(LatencyOp.RECORD_FAILURE.value, seconds, self.source, next(self._seq))

    def record_drained(self) -> None:
        self.local.record_drained()
        self.client.submit_latency(LatencyOp.RECORD_DRAINED.value, None, self.source, next(self._seq))

    @property
    def drained(self) -> int:
        return self.local.drained

    def quantile(self, q: float) -> float | None:
        return self.local.quantile(q)

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

    def summary(self) -> str:
        return self.local.summary()

    @property
    def _durations(self) -> list[float]:
        """The seed API documents ``_durations`` / ``_drained``: read-only views of the local tracker."""
        return self.local.samples()

    @property
    def _drained(self) -> int:
        return self.local.drained

    def __getattr__(self, name: str) -> Any:
        # count, total_seconds, percentiles(), completions_per_hour(), ...: the local tracker's.
        if name.startswith("__") or name in ("local", "client"):
            raise AttributeError(name)
        return getattr(self.local, name)

    # -- lifecycle --------------------------------------------------------------------------

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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
