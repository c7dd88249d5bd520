"""``RemoteLatencyTracker``: a drop-in ``DispatchLatencyTracker`` that also feeds the sidecar.

NeMo Gym's dispatcher calls ``record`` / ``record_failure`` / ``record_drained`` and reads
``drain_margin`` synchronously on its event loop, so every method here is synchronous and
takes microseconds: it updates a local :class:`DispatchLatencyTracker` (which therefore
answers exactly what the in-process tracker would, sidecar or not) and hands a small dict to
a background thread (:class:`SyncSidecarClient`) that batches it to the sidecar.

The tracker API carries no rollout identity, so each call is forwarded as a ``latency``
event ``{"kind": "latency", "op": <method>, "seconds": s, "source": <this tracker>,
"seq": n}``: ``source`` is unique per tracker instance (host, pid, random suffix) and ``seq``
counts its calls, which together form the idempotency key. In the sidecar these feed only the
run's tracker, its duration histogram and drained counter, never the rollout accounting or
health (those come from completion events or the follower).
"""

from __future__ import annotations

import itertools
from types import TracebackType
from typing import Any

import httpx

from sidecar.perf import DispatchLatencyTracker
from sidecar.wire import LatencyOp, source_id

from ._core import renamed_timeout
from .config import ClientConfig, ClientStats
from .sync import SyncSidecarClient

__all__ = ["RemoteLatencyTracker"]


class RemoteLatencyTracker:
    """``latency_tracker=RemoteLatencyTracker("http://127.0.0.1:9400", run_id="run-7")``.

    ``token`` and ``transport`` as :class:`SidecarClient`'s: ``None`` reads ``$ROLLOUT_SIDECAR_TOKEN``.
    ``drain_margin(configured)`` takes its argument as NeMo Gym's tracker does (``None``: adaptive).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        run_id: str | None = None,
        token: str | None = None,
        client: SyncSidecarClient | None = None,
        config: ClientConfig | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        local: DispatchLatencyTracker | None = None,
        start_run: bool = True,
        **run_fields: Any,
    ) -> None:
        if client is None:
            if base_url is None or run_id is None:
                raise ValueError("RemoteLatencyTracker needs base_url and run_id, or a client")
            client = SyncSidecarClient(
                base_url, run_id=run_id, token=token, config=config, transport=transport
            )
            self._owns_client = True
        else:
            self._owns_client = False
        self.client = client
        self.local = local if local is not None else DispatchLatencyTracker()
        self.source = source_id()
        self._seq = itertools.count()
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
        return self.local.drain_margin(configured)

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

    def flush(self, timeout_s: float | None = None, *, timeout: float | None = None) -> bool:
        """As :meth:`SyncSidecarClient.flush` (``timeout`` is the deprecated name of ``timeout_s``)."""
        return self.client.flush(renamed_timeout(timeout_s, timeout, None))

    def close(self, timeout_s: float | None = None, *, timeout: float | None = None) -> None:
        """Deliver what is buffered and stop the background thread (if this tracker owns it)."""
        wait_s = renamed_timeout(timeout_s, timeout, None)
        if self._owns_client:
            self.client.close(wait_s)

    def __enter__(self) -> RemoteLatencyTracker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
