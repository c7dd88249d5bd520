"""``SidecarClient``: the asyncio client a dispatcher awaits, built to fail open.

Every event call queues an encoded event and returns at once (``completed`` may wait up to
``ack_timeout_s`` for the sidecar's ``ng_perf``, and not at all while the sidecar is down,
answering with ``build_ng_perf`` computed locally instead). Delivery, batching, retries and
the spool live in the background sender (:mod:`dispatcher_client._batcher`). Every
completion, failure and drain carries this client's identity for it (``source``, unique per
client instance, and a ``seq`` counting its events); the encoded event, number included, is
what is retried and spooled, so a redelivery is acknowledged as a duplicate while two calls
with identical rows are two records, as the batch health check counts them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx
import orjson

from sidecar.wire import RUN_ID_PATTERN, EventKind, OutcomeStatus

from ._batcher import Batcher
from ._core import ClientClosed, ClientCore, SidecarError, read_error
from ._events import encode_event
from .config import ClientConfig

__all__ = ["RUN_ID_PATTERN", "ClientClosed", "SidecarClient", "SidecarError"]

_log = logging.getLogger("dispatcher_client")
#: Answers that mean the sidecar holds the event (so its ``ng_perf`` is the one to use).
_STORED = (OutcomeStatus.ACCEPTED, OutcomeStatus.DUPLICATE)


class SidecarClient(ClientCore):
    """Async, fail-open client of one run: ``async with SidecarClient(url, run_id=...) as c``.

    ``token`` is the bearer token the sidecar's ingest requires when it has one; ``None``
    (default) reads ``$ROLLOUT_SIDECAR_TOKEN``, ``""`` sends none. ``transport`` replaces
    httpx's network transport (tests, proxies).
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
        super().__init__(base_url, run_id=run_id, token=token, config=config, transport=transport)
        self._http: httpx.AsyncClient | None = None
        self._batcher: Batcher | None = None
        self._slow_since: int | None = None  # stats.sent when an answer last came too late

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> SidecarClient:
        """Create the pooled connection and start the sender (idempotent)."""
        if self._http is not None:
            return self
        config = self.config
        timeout_s = httpx.Timeout(config.request_timeout_s, connect=config.connect_timeout_s)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout_s,
            transport=self._transport,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=8),
        )
        self._batcher = Batcher(self._http, self.run_id, config, self.stats, headers=self._auth_headers())
        self._batcher.start()
        return self

    async def aclose(self, timeout_s: float | None = None) -> None:
        """Deliver what is buffered for up to ``timeout_s`` (default ``close_timeout_s``), then close."""
        if self._batcher is not None:
            await self._batcher.close(self.config.close_timeout_s if timeout_s is None else timeout_s)
            self._batcher = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> SidecarClient:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything submitted so far is acknowledged; False if ``timeout_s`` passed first."""
        return await self._sender().flush(timeout_s)

    def _sender(self) -> Batcher:
        if self._batcher is None:
            raise self._closed_error()
        return self._batcher

    # -- events ---------------------------------------------------------------------------

    def submit_event(
        self, event: Mapping[str, Any], *, want_result: bool = False
    ) -> asyncio.Future[dict[str, Any] | None] | None:
        """Queue one raw API event (a dict of ``sidecar.ingest.events``); never waits."""
        future: asyncio.Future[dict[str, Any] | None] | None = None
        if want_result:
            future = asyncio.get_running_loop().create_future()
        sender = self._sender()
        try:
            data = encode_event(event)
        except orjson.JSONEncodeError as exc:  # fail open: a row that is not JSON is not sent
            self.stats.submitted += 1
            self.stats.rejected += 1
            _log.warning(
                "dispatcher_client: %s event not JSON-serializable, not sent: %s", event.get("kind"), exc
            )
            if future is not None:
                future.set_result(None)
            return future
        if event.get("kind") == EventKind.RUN_STARTED:
            sender.run_started = data
        sender.submit(data, future)
        return future

    async def start_run(
        self,
        *,
        plan: Mapping[Any, int] | None = None,
        dispatch_budget_s: float | None = None,
        drain_margin_s: float | None = None,
        materialized_inputs: str | None = None,
        tracking: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> None:
        """Declare the run (plan: task index -> repeats); re-sent automatically to a fresh sidecar.

        ``tracking`` names existing tracker runs the sidecar logs this run into
        (``{"mlflow_run_id": ..., "wandb_run_path": ...}``, docs/operations.md).
        """
        if tracking is not None:  # {"mlflow_run_id": ..., "wandb_run_path": ...}: runs to log into
            fields = {**fields, "tracking": dict(tracking)}
        self.submit_event(
            self._run_started(plan, dispatch_budget_s, drain_margin_s, materialized_inputs, fields)
        )

    async def completed(
        self,
        row: Mapping[str, Any] | None,
        result: Mapping[str, Any],
        *,
        seconds: float,
        latency_ms: float | None = None,
        wait: bool = True,
    ) -> dict[str, Any] | None:
        """Report a completion; returns its ``ng_perf`` (the sidecar's, or built locally).

        Waits for the sidecar's answer up to ``ack_timeout_s``, and not at all while it is down
        or after an answer came too late, until acknowledgements flow again.
        """
        self._sender()
        event = self._completion(row, result, seconds, latency_ms)
        return await self.deliver_completion(event, result, seconds, latency_ms, wait=wait)

    async def deliver_completion(
        self,
        event: Mapping[str, Any],
        result: Mapping[str, Any],
        seconds: float,
        latency_ms: float | None,
        *,
        wait: bool,
    ) -> dict[str, Any] | None:
        """Send a ``completed`` event already built (and recorded) by this core, and answer its
        ``ng_perf``: the sidecar's, waited for as :meth:`completed` says, or built locally."""
        if self._slow_since is not None and self.stats.sent != self._slow_since:
            self._slow_since = None  # acknowledgements flow again
        if (
            not wait
            or not self.stats.connected
            or self._slow_since is not None
            or self.config.ack_timeout_s <= 0
        ):
            self.submit_event(event)
            return self._local_ng_perf(result, seconds, latency_ms)
        future = self.submit_event(event, want_result=True)
        assert future is not None
        try:
            answer = await asyncio.wait_for(asyncio.shield(future), self.config.ack_timeout_s)
        except TimeoutError:
            answer = None
            self._slow_since = self.stats.sent  # do not wait again until something is acknowledged
        if answer is not None and answer.get("status") in _STORED:
            ng_perf: dict[str, Any] | None = answer.get("ng_perf")
            return ng_perf
        return self._local_ng_perf(result, seconds, latency_ms)

    async def failed(
        self, row: Mapping[str, Any] | None, failure_row: Mapping[str, Any], *, seconds: float | None = None
    ) -> None:
        """Report a failed attempt (``seconds`` feeds ``record_failure``; ``None``: not measured)."""
        self._sender()
        self.submit_event(self._failure(row, failure_row, seconds))

    async def drained(self, row: Mapping[str, Any] | None, result: Mapping[str, Any] | None = None) -> None:
        """Report a rollout the dispatch budget never started (``record_drained``)."""
        self._sender()
        self.submit_event(self._drain(row, result))

    async def started(self, row: Mapping[str, Any] | None) -> None:
        """Report that a rollout attempt was dispatched (in flight until its end event).

        A row without ``_ng_task_index`` cannot be tracked and is not sent (``stats.rejected``).
        """
        self.submit_progress("started", row)

    async def heartbeat(self, row: Mapping[str, Any] | None) -> None:
        """A sign of life of an in-flight attempt (optional; lets the sidecar tell a stall)."""
        self.submit_progress("heartbeat", row)

    def submit_progress(self, kind: str, row: Mapping[str, Any] | None) -> None:
        """Queue a ``started`` or ``heartbeat`` event for ``row``; never waits."""
        self._sender()
        event = self._progress(kind, row)
        if event is not None:
            self.submit_event(event)

    async def run_ended(self) -> None:
        self.submit_event(self._ended())

    # -- reads ----------------------------------------------------------------------------

    async def _get(self, path: str, params: dict[str, Any], timeout_s: float | None) -> httpx.Response:
        if self._http is None:
            raise self._closed_error()
        try:
            response = await self._http.get(
                path, params=params, headers=self._auth_headers(), timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            raise read_error(self.base_url, path, run_id=self.run_id, stats=self.stats, error=exc) from exc
        if response.status_code != 200:
            raise read_error(self.base_url, path, run_id=self.run_id, stats=self.stats, response=response)
        return response

    async def drain_margin(
        self, configured: float | None = None, *, timeout_s: float = 0.5, strict: bool = False
    ) -> float | None:
        """The sidecar's drain margin (``None`` when none yet), over every client of the run.

        Fails open: while the sidecar is down, or when it does not answer within ``timeout_s``
        (then for the next second), this client's local tracker answers (its own events only,
        the in-process rule), counted in ``stats.local_drain_margin``. ``strict`` raises
        ``SidecarError`` instead.
        """
        now = asyncio.get_running_loop().time()
        if self._ask_sidecar(now, strict):
            try:
                body = await self.drain_margin_info(configured, timeout_s=timeout_s)
            except ClientClosed:
                raise
            except SidecarError:
                if strict:
                    raise
                self._sidecar_unanswered(now)
            else:
                margin = body.get("drain_margin")
                return None if margin is None else float(margin)
        return self._local_drain_margin(configured)

    async def drain_margin_info(
        self, configured: float | None = None, *, timeout_s: float = 0.5
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"run_id": self.run_id}
        if configured is not None:
            params["configured"] = repr(float(configured))
        response = await self._get("/drain_margin", params, timeout_s)
        body: dict[str, Any] = orjson.loads(response.content)
        return body

    async def report(self, *, timeout_s: float = 30.0) -> dict[str, Any]:
        """The post-run report (``GET /report``)."""
        response = await self._get("/report", {"run_id": self.run_id}, timeout_s)
        body: dict[str, Any] = orjson.loads(response.content)
        return body

    async def verdict_lines(self, *, timeout_s: float = 30.0) -> bytes:
        """The ``rollout_verdicts.jsonl`` bytes (``GET /report/verdicts``)."""
        return (await self._get("/report/verdicts", {"run_id": self.run_id}, timeout_s)).content

    async def quality_summary_bytes(self, *, timeout_s: float = 30.0) -> bytes:
        """The exact ``quality_summary.json`` bytes."""
        return (await self._get("/report/quality_summary.json", {"run_id": self.run_id}, timeout_s)).content
