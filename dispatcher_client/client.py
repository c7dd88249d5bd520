"""``SidecarClient``: the asyncio client a dispatcher awaits, built to fail open (a local tracker
answers while the sidecar is down). Events are numbered ``(source, seq)``, so a redelivery is a duplicate."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx
import orjson

from sidecar.perf import DispatchLatencyTracker, build_ng_perf
from sidecar.wire import RUN_ID_PATTERN, EventKind, EventNumber, dump_row, row_identity, source_id

from .config import ClientConfig, ClientStats, resolve_token
from .sender import Sender

__all__ = [
    "ClientClosed", "SidecarAuthError", "SidecarClient", "SidecarError", "SidecarUnreachable",
    "completed_event", "drained_event", "encode_event", "failed_event", "latency_event", "progress_event",
    "run_ended_event", "run_started_event",
]

_log = logging.getLogger("dispatcher_client")
_Row = Mapping[str, Any] | None
_Json = dict[str, Any]
_STORED = ("accepted", "duplicate")  # the sidecar holds the event: its ng_perf is the one
#: How long reads go to the local tracker after the sidecar failed to answer one.
_READS_DOWN_S = 1.0
_TOKEN_FIX = "set $ROLLOUT_SIDECAR_TOKEN, or pass token=..., to the token the service reads from --token-file"


class SidecarError(RuntimeError):
    """A read the sidecar could not answer: ``status`` and ``response`` are its answer (``None``
    when none came)."""

    def __init__(self, message: str, *, status: int | None = None, response: httpx.Response | None = None):
        super().__init__(message)
        self.status = status
        self.response = response


class ClientClosed(SidecarError):
    """The client is not open (never opened, or closed)."""


class SidecarUnreachable(SidecarError):
    """No sidecar answered at the client's URL (refused, timed out, name not found)."""


class SidecarAuthError(SidecarError):
    """The sidecar refused this client's token (401/403), on the read or on the events before it."""


# -- the API events (absent optional values are left out, not sent as null) ------------------

#: Rows may carry numpy scalars or integer keys: encode them rather than fail the dispatcher.
_DUMP_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def encode_event(event: Mapping[str, Any]) -> bytes:
    """JSON bytes of an event however deep its row nests; ``orjson.JSONEncodeError`` if not JSON."""
    return dump_row(event, _DUMP_OPTIONS)


def _event(kind: str, dispatched: _Row, number: EventNumber | None, at: float | None,
           **optional: Any) -> _Json:
    event: dict[str, Any] = {"kind": kind, **row_identity(dispatched)}
    if number is not None:
        event["source"], event["seq"] = number
    if at is not None:
        event["at"] = at
    event.update((key, value) for key, value in optional.items() if value is not None)
    return event


def run_started_event(*, plan: Mapping[Any, int] | None, dispatch_budget_s: float | None,
                      drain_margin_s: float | None, materialized_inputs: str | None,
                      fields: Mapping[str, Any]) -> _Json:
    """``run_started``; the plan's task indices become strings (JSON object keys)."""
    event = _event(EventKind.RUN_STARTED, None, None, None, materialized_inputs=materialized_inputs,
                   dispatch_budget_s=dispatch_budget_s, drain_margin_s=drain_margin_s)
    if plan is not None:
        event["plan"] = {str(task): repeats for task, repeats in plan.items()}
    return {**fields, **event}


def completed_event(row: _Row, result: Mapping[str, Any], seconds: float,
                    latency_ms: float | None, number: EventNumber | None = None,
                    at: float | None = None) -> _Json:
    """``number``: the identity ``(source, seq)`` (``None``: the sidecar keys the event by content)."""
    return _event(EventKind.COMPLETED, row, number, at, seconds=seconds, row=result, latency_ms=latency_ms)


def failed_event(row: _Row, failure_row: Mapping[str, Any], seconds: float | None,
                 number: EventNumber | None = None, at: float | None = None) -> _Json:
    return _event(EventKind.FAILED, row, number, at, row=failure_row, seconds=seconds)


def drained_event(row: _Row, result: _Row,
                  number: EventNumber | None = None, at: float | None = None) -> _Json:
    return _event(EventKind.DRAINED, row, number, at, row=result)


def progress_event(kind: str, row: _Row, at: float | None = None) -> _Json | None:
    """``started`` / ``heartbeat``; ``None`` for a row without a task index. ``at`` only on a start."""
    event = _event(kind, row, None, at if kind == EventKind.STARTED else None)
    return event if "task_index" in event else None


def latency_event(op: str, seconds: float | None, source: str, seq: int, at: float | None = None) -> _Json:
    """``latency``: one ``RemoteLatencyTracker`` call (``op`` a ``LatencyOp``)."""
    return _event(EventKind.LATENCY, None, EventNumber(source, seq), at, op=op, seconds=seconds)


def run_ended_event(generation: int | None = None, ended_at: float | None = None) -> _Json:
    """``run_ended`` (``generation``: a follower's, left out when 0)."""
    return _event(EventKind.RUN_ENDED, None, None, None, generation=generation or None, ended_at=ended_at)


class SidecarClient:
    """Async, fail-open client of one run: ``async with SidecarClient(url, run_id=...) as c``.

    ``token``: the bearer token (``None`` reads ``$ROLLOUT_SIDECAR_TOKEN``, ``""`` sends none);
    ``transport`` replaces httpx's network transport (tests, proxies).
    """

    def __init__(self, base_url: str, *, run_id: str, token: str | None = None,
                 config: ClientConfig | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not RUN_ID_PATTERN.fullmatch(run_id):
            raise ValueError(f"run id {run_id!r} must match {RUN_ID_PATTERN.pattern}")
        self.base_url = base_url.rstrip("/")
        self.run_id = run_id
        self.config = config or ClientConfig()
        self.stats = ClientStats()
        token = resolve_token(token)
        self.auth_headers = {"authorization": f"Bearer {token}"} if token else {}
        self._transport = transport
        #: This client's own events: the drain margin while the sidecar is not there.
        self.local = DispatchLatencyTracker()
        self._run_margin: float | None = None
        self._reads_down_until = 0.0
        self.source = source_id()
        self._seq = itertools.count()
        self._http: httpx.AsyncClient | None = None
        self._sender: Sender | None = None
        self._slow_since: int | None = None  # stats.sent when an answer last came too late

    @property
    def http(self) -> httpx.AsyncClient:
        """The pooled connection (``ClientClosed`` when not open)."""
        if self._http is None:
            raise self._closed_error()
        return self._http

    def next_number(self) -> EventNumber:
        """A fresh ``(source, seq)`` (thread-safe: one atomic counter step)."""
        return EventNumber(self.source, next(self._seq))

    def _closed_error(self) -> ClientClosed:
        name = type(self).__name__
        return ClientClosed(f"{name} is not open: use it as a context manager, or open it first")

    async def open(self) -> SidecarClient:
        """Create the pooled connection and start the sender (idempotent)."""
        if self._http is None:
            config = self.config
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(config.request_timeout_s, connect=config.connect_timeout_s),
                transport=self._transport,
                limits=httpx.Limits(max_connections=8, max_keepalive_connections=8),
            )
            self._sender = Sender(self._http, self.run_id, config, self.stats, headers=self.auth_headers)
            self._sender.start()
        return self

    async def aclose(self, timeout_s: float | None = None) -> None:
        """Deliver what is buffered for up to ``timeout_s`` (default ``close_timeout_s``), then close."""
        if self._sender is not None:
            await self._sender.close(self.config.close_timeout_s if timeout_s is None else timeout_s)
            self._sender = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> SidecarClient:
        return await self.open()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything submitted so far is acknowledged; False if ``timeout_s`` passed first."""
        return await self._open_sender().flush(timeout_s)

    def _open_sender(self) -> Sender:
        if self._sender is None:
            raise self._closed_error()
        return self._sender

    # -- events (the builders also serve SyncSidecarClient, which runs one of these) ----------

    def submit_event(self, event: Mapping[str, Any], *, want_result: bool = False
                     ) -> asyncio.Future[dict[str, Any] | None] | None:
        """Queue one API event; never waits. ``want_result``: a future of its per-event result."""
        sender = self._open_sender()
        future = asyncio.get_running_loop().create_future() if want_result else None
        try:
            data = encode_event(event)
        except orjson.JSONEncodeError as exc:  # fail open: a row that is not JSON is not sent
            self.stats.submitted += 1
            self.stats.rejected += 1
            kind = event.get("kind")
            _log.warning("dispatcher_client: %s event not JSON-serializable, not sent: %s", kind, exc)
            if future is not None:
                future.set_result(None)
            return future
        if event.get("kind") == EventKind.RUN_STARTED:
            sender.run_started = data  # re-sent first to a sidecar that answers unknown_run
        sender.submit(data, future)
        return future

    def build_run_started(self, plan: Mapping[Any, int] | None, dispatch_budget_s: float | None,
                          drain_margin_s: float | None, materialized_inputs: str | None,
                          tracking: Mapping[str, str] | None, fields: Mapping[str, Any]) -> _Json:
        if drain_margin_s is not None:
            self._run_margin = drain_margin_s  # the local fallback's configured margin
        if tracking is not None:
            fields = {**fields, "tracking": dict(tracking)}
        return run_started_event(plan=plan, dispatch_budget_s=dispatch_budget_s,
                                 drain_margin_s=drain_margin_s,
                                 materialized_inputs=materialized_inputs,
                                 fields={"started_at": self.config.clock(), **fields})

    def build_completed(self, row: _Row, result: Mapping[str, Any], seconds: float,
                        latency_ms: float | None) -> _Json:
        self.local.record(seconds)
        return completed_event(row, result, seconds, latency_ms, self.next_number(), self.config.clock())

    def build_failed(self, row: _Row, failure_row: Mapping[str, Any],
                     seconds: float | None) -> _Json:
        if seconds is not None:
            self.local.record_failure(seconds)
        return failed_event(row, failure_row, seconds, self.next_number(), self.config.clock())

    def build_drained(self, row: _Row, result: _Row) -> _Json:
        self.local.record_drained()
        return drained_event(row, result, self.next_number(), self.config.clock())

    def build_progress(self, kind: str, row: _Row) -> _Json | None:
        """``None`` (counted as rejected) for a row without a task index, which cannot be tracked."""
        event = progress_event(kind, row, self.config.clock())
        if event is None:
            self.stats.submitted += 1
            self.stats.rejected += 1
        return event

    async def start_run(self, *, plan: Mapping[Any, int] | None = None,
                        dispatch_budget_s: float | None = None,
                        drain_margin_s: float | None = None, materialized_inputs: str | None = None,
                        tracking: Mapping[str, str] | None = None, **fields: Any) -> None:
        """Declare the run (plan: task index -> repeats); re-sent automatically to a fresh sidecar.
        ``tracking``: tracker runs to log into (``{"mlflow_run_id": ..., "wandb_run_path": ...}``)."""
        self.submit_event(self.build_run_started(plan, dispatch_budget_s, drain_margin_s, materialized_inputs,
                                                 tracking, fields))

    async def completed(self, row: _Row, result: Mapping[str, Any], *, seconds: float,
                        latency_ms: float | None = None, wait: bool = True) -> _Json | None:
        """Report a completion; returns its ``ng_perf`` (the sidecar's, or built locally)."""
        self._open_sender()
        event = self.build_completed(row, result, seconds, latency_ms)
        return await self.deliver_completion(event, result, seconds, latency_ms, wait=wait)

    async def deliver_completion(self, event: Mapping[str, Any], result: Mapping[str, Any], seconds: float,
                                 latency_ms: float | None, *, wait: bool) -> _Json | None:
        """Send a built ``completed`` event; wait for the sidecar's ``ng_perf`` up to ``ack_timeout_s``
        (not while it is down, nor after an answer came too late until acks flow again)."""
        if self._slow_since is not None and self.stats.sent != self._slow_since:
            self._slow_since = None
        waits = wait and self.stats.connected and self._slow_since is None and self.config.ack_timeout_s > 0
        if not waits:
            self.submit_event(event)
            return self.local_ng_perf(result, seconds, latency_ms)
        future = self.submit_event(event, want_result=True)
        assert future is not None
        try:
            async with asyncio.timeout(self.config.ack_timeout_s):  # not wait_for: it can eat a cancel
                answer = await asyncio.shield(future)
        except TimeoutError:
            answer = None
            self._slow_since = self.stats.sent
        if answer is not None and answer.get("status") in _STORED:
            ng_perf: dict[str, Any] | None = answer.get("ng_perf")
            return ng_perf
        return self.local_ng_perf(result, seconds, latency_ms)

    def local_ng_perf(self, result: Mapping[str, Any], seconds: float, latency_ms: float | None
                      ) -> _Json | None:
        self.stats.local_ng_perf += 1
        return build_ng_perf(result, latency_ms if latency_ms is not None else seconds * 1000.0)

    async def failed(self, row: _Row, failure_row: Mapping[str, Any], *,
                     seconds: float | None = None) -> None:
        """Report a failed attempt (``seconds`` feeds ``record_failure``; ``None``: not measured)."""
        self._open_sender()
        self.submit_event(self.build_failed(row, failure_row, seconds))

    async def drained(self, row: _Row, result: _Row = None) -> None:
        """Report a rollout the dispatch budget never started (``record_drained``)."""
        self._open_sender()
        self.submit_event(self.build_drained(row, result))

    async def started(self, row: _Row) -> None:
        """A rollout attempt was dispatched (in flight until its end event)."""
        self.submit_progress(EventKind.STARTED, row)

    async def heartbeat(self, row: _Row) -> None:
        """A sign of life of an in-flight attempt (lets the sidecar tell a stall)."""
        self.submit_progress(EventKind.HEARTBEAT, row)

    def submit_progress(self, kind: str, row: _Row) -> None:
        self._open_sender()
        if (event := self.build_progress(kind, row)) is not None:
            self.submit_event(event)

    async def run_ended(self) -> None:
        self.submit_event(run_ended_event(ended_at=self.config.clock()))

    def read_error(self, path: str, error: Exception | None = None, response: httpx.Response | None = None
                   ) -> SidecarError:
        """A read that got no answer (``error``) or a non-200 one, in one line naming URL and cause."""
        if response is None:
            return SidecarUnreachable(
                f"cannot reach the sidecar at {self.base_url}: GET {path} failed "
                f"({type(error).__name__}: {error}); is `rollout-sidecar serve` running there?"
            )
        status = response.status_code
        refused = self.stats.last_error or ""
        if status in (401, 403):
            return SidecarAuthError(
                f"the sidecar at {self.base_url} refused this client's token: GET {path} answered "
                f"HTTP {status} "
                f"(no or wrong bearer token; {_TOKEN_FIX})", status=status, response=response)
        unknown = status == 404 and b"unknown_run" in response.content
        if unknown and refused.startswith(("HTTP 401", "HTTP 403")):
            return SidecarAuthError(
                f"the sidecar at {self.base_url} has no run {self.run_id!r} because it refused this client's "
                f"events with {refused.split(':', 1)[0]} (no or wrong bearer token; {_TOKEN_FIX})",
                status=status, response=response)
        return SidecarError(f"GET {self.base_url}{path}: HTTP {status}: {response.text[:300]}",
                            status=status, response=response)

    async def _get(self, path: str, timeout_s: float, **params: Any) -> httpx.Response:
        try:
            response = await self.http.get(path, params={"run_id": self.run_id, **params},
                                            headers=self.auth_headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise self.read_error(path, error=exc) from exc
        if response.status_code != 200:
            raise self.read_error(path, response=response)
        return response

    def ask_sidecar(self, now: float, strict: bool) -> bool:
        """Whether a drain-margin read goes to the sidecar (else to the local tracker)."""
        return strict or (self.stats.connected and now >= self._reads_down_until)

    def local_drain_margin(self, configured: float | None, unanswered_at: float | None = None
                           ) -> float | None:
        """The local tracker's answer; ``unanswered_at``: the sidecar just failed (ask in a second)."""
        if unanswered_at is not None:
            self._reads_down_until = unanswered_at + _READS_DOWN_S
        self.stats.local_drain_margin += 1
        return self.local.drain_margin(configured if configured is not None else self._run_margin)

    async def drain_margin(self, configured: float | None = None, *, timeout_s: float = 0.5,
                           strict: bool = False) -> float | None:
        """The sidecar's drain margin over every client of the run (``None`` when none yet); the local
        tracker answers while it is down or slow (for the next second), ``strict`` raises instead."""
        now = asyncio.get_running_loop().time()
        if not self.ask_sidecar(now, strict):
            return self.local_drain_margin(configured)
        try:
            body = await self.drain_margin_info(configured, timeout_s=timeout_s)
        except ClientClosed:
            raise
        except SidecarError:
            if strict:
                raise
            return self.local_drain_margin(configured, now)
        margin = body.get("drain_margin")
        return None if margin is None else float(margin)

    async def drain_margin_info(self, configured: float | None = None, *, timeout_s: float = 0.5
                                ) -> _Json:
        """``GET /drain_margin``'s whole answer (margin, samples)."""
        params = {} if configured is None else {"configured": repr(float(configured))}
        body: dict[str, Any] = orjson.loads((await self._get("/drain_margin", timeout_s, **params)).content)
        return body

    async def report(self, *, timeout_s: float = 30.0) -> _Json:
        """The post-run report (``GET /report``)."""
        body: dict[str, Any] = orjson.loads((await self._get("/report", timeout_s)).content)
        return body
