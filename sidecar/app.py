"""The HTTP surface: versioned ingest, drain margin, metrics, report, health probes.

Every rejection is a 4xx (or 503 when the journal cannot store) with the body
``{"error": <code>, "field": <where>, "detail": <what>}``: handlers raise
:class:`~sidecar.request_errors.RequestError` and one registered handler renders and counts it.
Request bodies are capped and their JSON nesting bounded before parsing; the bearer token is
compared in constant time and never logged; no row content is ever logged.
"""

from __future__ import annotations

import functools
import hmac
import math
import re
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import structlog
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sidecar._plain_route import PlainPostRoute
from sidecar._priority_lane import LaneAnswer, PriorityLane
from sidecar.accounting import identity_chars
from sidecar.events import EVENT_KINDS, MAX_SECONDS, Completed, Event, EventBatch, RunStarted
from sidecar.ingest import IdentityTooLong, PlanError, TooManyRuns, UnknownRun
from sidecar.journal import JournalUnavailable
from sidecar.json_bodies import dumps_json, dumps_report, line_text, too_deep
from sidecar.metrics import render
from sidecar.openapi import openapi_document
from sidecar.raw_rows import RawRow, decode_request, row_spans
from sidecar.request_errors import (
    RequestError,
    error_body,
    json_response,
    render_request_error,
    request_error_handler,
)
from sidecar.responses import DrainMarginBody, HealthzBody, InflightBody, IngestBody, ReadyBody, RunListBody
from sidecar.runs import RunState
from sidecar.service import Service
from sidecar.web.routes import web_routes
from sidecar.wire import RUN_ID_PATTERN, FollowerState

__all__ = [
    "ServerTiming",
    "create_app",
]

_log = structlog.get_logger("sidecar.app")
_JSON = "application/json"
_INFLIGHT_DEFAULT_LIMIT = 20
_INFLIGHT_MAX_LIMIT = 1000
#: The ingest route's path (Starlette's ``/v1/runs/{run_id}/events``), served as plain ASGI.
_EVENTS_PATH = re.compile(r"/v1/runs/([^/]+)/events")


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return json_response(dumps_json(body), status, headers)


def _field_of(error: Any) -> str:
    parts = [str(part) for part in error["loc"] if part not in EVENT_KINDS]
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("kind")
    return ".".join(["events", *parts])


_LINE_PARAMS: dict[str, type] = {"line_number": int, "generation": int, "seconds": float, "latency_ms": float}


def _validate(parsed: Any) -> list[Event]:
    try:
        return EventBatch.validate_python(parsed)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        raise RequestError(
            422, "validation", f"{first['msg']} ({exc.error_count()} error(s))", _field_of(first)
        ) from exc


def _with_raw_rows(events: list[Event], body: bytes | bytearray) -> list[Event]:
    """``events`` with each completion's row as the bytes it was sent as, so its content hash is
    the one the raw path computes for the same row (a retry is a duplicate whichever path the
    body took)."""
    if not any(isinstance(event, Completed) and isinstance(event.row, dict) for event in events):
        return events
    spans = row_spans(body)
    if spans is None or len(spans) != len(events):
        return events
    return [
        event.model_copy(update={"row": RawRow(span, vetted=False, parsed=event.row)})
        if isinstance(event, Completed) and isinstance(event.row, dict)
        else event
        for event, span in zip(events, spans, strict=True)
    ]


#: An ASGI request's headers: (lower-case name, value) byte pairs, as the server sent them.
_RawHeaders = Iterable[tuple[bytes, bytes]]


def _header(headers: _RawHeaders, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case), as text, or ``None``."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's non-empty chunks as they arrive; a client that closes the connection
    before the body's end is refused."""
    more = True
    while more:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            more = message.get("more_body", False)
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
        elif kind == "http.disconnect":
            raise RequestError(400, "bad_request", "the client closed the connection mid-body", "body")


def _too_many_runs(held: int) -> RequestError:
    return RequestError(
        429,
        "too_many_runs",
        f"the service holds {held} runs, its --max-runs cap; end runs (they are dropped "
        "after --retain-ended) or raise the cap",
        "run_id",
    )


class _Handlers:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.settings = service.settings
        self._held = 0

    # -- helpers --------------------------------------------------------------------------

    def _authorize(self, header: str | None) -> None:
        """Refuse a request whose ``Authorization`` header does not carry the bearer token."""
        token = self.settings.token
        if token is None:
            return
        scheme, _, given = (header or "").partition(" ")
        expected = token.get().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise RequestError(
                401,
                "unauthorized",
                "a valid bearer token is required",
                "authorization",
                {"WWW-Authenticate": "Bearer"},
            )

    async def _body(self, receive: Receive, declared: int | None) -> bytes | bytearray:
        """The whole body, at most the cap. With a declared length it is read straight into one
        buffer of that size (no list of chunks joined into a second copy at the end)."""
        cap = self.settings.body_cap
        if declared is not None:
            return await self._body_into(receive, declared)
        chunks: list[bytes] = []
        size = 0
        async for chunk in _chunks(receive):
            size += len(chunk)
            if size > cap:
                raise RequestError(413, "too_large", f"body exceeds the {cap}-byte cap", "body")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _body_into(self, receive: Receive, declared: int) -> bytes | bytearray:
        """A body of ``declared`` bytes. One that arrives as one chunk (the usual case: the HTTP
        layer gathers what has arrived before the handler reads) is that chunk, never copied;
        else the chunks are written into one buffer of the declared size."""
        first = b""
        buffer: bytearray | None = None
        size = 0
        async for chunk in _chunks(receive):
            end = size + len(chunk)
            if end > declared:  # the HTTP layer enforces Content-Length; never write past it
                raise RequestError(
                    400, "bad_request", f"body longer than its Content-Length {declared}", "body"
                )
            if not size:
                first = chunk
            else:
                if buffer is None:
                    buffer = bytearray(declared)
                    buffer[:size] = first
                buffer[size:end] = chunk
            size = end
        if size < declared:
            raise RequestError(
                400,
                "bad_request",
                f"body of {size} bytes is shorter than its Content-Length {declared}",
                "body",
            )
        return first if buffer is None else buffer

    def _check_caps(self, run_id: str, events: list[Event]) -> None:
        """The service's configurable caps on what one batch may add to its state.

        A first check, before any row is read further; the ingestor checks ``--max-runs`` again
        atomically with the commit, and identities read from rows once they are derived.
        """
        settings = self.settings
        cap = settings.max_identity_chars
        creates = False
        for index, event in enumerate(events):
            if isinstance(event, RunStarted):
                creates = True
                self._check_plan(index, event)
            for name in ("task_index", "rollout_index"):
                value = getattr(event, name, None)
                if isinstance(value, str):
                    chars = len(value)
                elif type(value) is int and (cap < 20 or value.bit_length() > 63):
                    chars = identity_chars(value)
                else:
                    continue
                if chars > cap:
                    raise RequestError(
                        422,
                        "validation",
                        f"{name} is {chars} characters, over the service's --max-identity-chars cap of {cap}",
                        f"events.{index}.{name}",
                    )
        runs = self.service.ingestor.runs
        if creates and run_id not in runs and len(runs) >= settings.max_runs:
            raise _too_many_runs(len(runs))

    def _check_plan(self, index: int, event: RunStarted) -> None:
        plan, settings = event.plan, self.settings
        if plan is None:
            return
        if len(plan) > settings.max_plan_tasks:
            raise RequestError(
                422,
                "validation",
                f"plan has {len(plan)} tasks, over the service's --max-plan-tasks cap of "
                f"{settings.max_plan_tasks}",
                f"events.{index}.plan",
            )
        cap = settings.max_identity_chars
        longest = max(plan, key=len, default="")
        if len(longest) > cap:
            raise RequestError(
                422,
                "validation",
                f"plan task {longest[:40]!r}... is {len(longest)} characters, over the service's "
                f"--max-identity-chars cap of {cap}",
                f"events.{index}.plan",
            )

    def _run(self, run_id: str | None) -> RunState:
        self._require_ready()
        if not run_id:
            raise RequestError(400, "validation", "run_id is required", "run_id")
        run = self.service.ingestor.runs.get(run_id)
        if run is None:
            raise RequestError(404, "unknown_run", f"unknown run {run_id!r}", "run_id")
        return run

    # -- routes ---------------------------------------------------------------------------

    def _require_ready(self, *, counted: bool = True) -> None:
        """Run-scoped requests wait for the journal replay (run state is being rebuilt)."""
        if not self.service.ready:
            progress = self.service.replay_progress
            done = progress["snapshot_seq"] + progress["replayed"]
            raise RequestError(
                503,
                "starting",
                f"replaying the journal ({done} of {progress['journal_events']} events); retry",
                None,
                {"Retry-After": "1"},
                counted=counted,
            )

    def _check_run_id(self, run_id: str) -> None:
        if not RUN_ID_PATTERN.fullmatch(run_id):
            raise RequestError(
                400,
                "validation",
                f"run id {run_id[:160]!r} must match {RUN_ID_PATTERN.pattern}",
                "run_id",
            )

    @asynccontextmanager
    async def _held_body(self, declared: str | None, receive: Receive) -> AsyncIterator[bytes | bytearray]:
        """The request body, counted against ``max_body_bytes_in_flight`` until the block ends.

        What a request declares is reserved before a byte is read (a body without a length
        reserves the cap), so concurrent large bodies are refused with 503 instead of being
        buffered side by side.
        """
        cap = self.settings.body_cap
        size = int(declared) if declared is not None and declared.isdigit() else cap
        if size > cap:
            raise RequestError(
                413, "too_large", f"body of {declared} bytes exceeds the {cap}-byte cap", "body"
            )
        limit = self.settings.max_body_bytes_in_flight
        if self._held + size > limit:
            raise RequestError(
                503,
                "busy",
                f"{self._held} body bytes are being processed; this request's {size} would pass the "
                f"service's --max-body-bytes-in-flight cap of {limit}; retry",
                "body",
                {"Retry-After": "1"},
            )
        self._held += size
        try:
            yield await self._body(
                receive, int(declared) if declared is not None and declared.isdigit() else None
            )
        finally:
            self._held -= size

    def _parse_events(self, body: bytes | bytearray) -> list[Event]:
        """The request's events, read once: a vetted body with its rows kept as bytes
        (``sidecar.raw_rows``), any other body parsed and refused exactly as the models say."""
        decoded = decode_request(body, self.settings.max_json_depth)
        if decoded is not None:
            return _validate(decoded)
        return _with_raw_rows(self._parse_in_full(body), body)

    def _parse_in_full(self, body: bytes | bytearray) -> list[Event]:
        if too_deep(body, self.settings.max_json_depth):
            raise RequestError(
                400, "too_deep", f"JSON nesting exceeds {self.settings.max_json_depth} levels", "body"
            )
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise RequestError(400, "invalid_json", f"body is not valid JSON: {exc}", "body") from exc
        if isinstance(parsed, dict) and set(parsed) == {"events"}:
            parsed = parsed["events"]
        return _validate(parsed)

    async def _ingest(self, run_id: str, events: list[Event]) -> bytes:
        """Store ``events`` and answer with their outcomes (a 200's JSON body)."""
        self._check_caps(run_id, events)
        try:
            outcomes = await self.service.ingestor.submit(run_id, events)
        except UnknownRun as exc:
            raise RequestError(404, "unknown_run", str(exc), "run_id") from exc
        except TooManyRuns as exc:
            raise _too_many_runs(exc.held) from exc
        except IdentityTooLong as exc:
            raise RequestError(422, "validation", str(exc), exc.field) from exc
        except PlanError as exc:
            raise RequestError(422, "validation", str(exc), f"events.{exc.index}.{exc.field}") from exc
        except JournalUnavailable as exc:
            _log.error("journal unavailable", detail=str(exc))
            raise RequestError(
                503, "journal_unavailable", f"events not stored: {exc}", None, {"Retry-After": "1"}
            ) from exc
        answer: IngestBody = {"run_id": run_id, "results": [o.as_dict(i) for i, o in enumerate(outcomes)]}
        return dumps_json(answer)

    async def events(self, run_id: str, headers: _RawHeaders, receive: Receive) -> bytes:
        """``POST /v1/runs/{run_id}/events``: a batch of events; the 200 answer's body."""
        self._authorize(_header(headers, b"authorization"))
        self._check_run_id(run_id)
        self._require_ready()
        async with self._held_body(_header(headers, b"content-length"), receive) as body:
            events = self._parse_events(body)
            del body  # parsed: the raw body need not stay resident while the batch is stored
            return await self._ingest(run_id, events)

    async def lines(self, request: Request) -> Response:
        """One raw rollout line as the body (no JSON escaping): a ``completed`` event with ``line``.

        Query: ``line_number`` (required), ``generation``, ``seconds``, ``latency_ms``; a
        follower sends a line this way when escaping it into an event would pass the body cap.
        """
        run_id = request.path_params["run_id"]
        self._authorize(request.headers.get("authorization"))
        self._check_run_id(run_id)
        self._require_ready()
        event: dict[str, Any] = {"kind": "completed"}
        for name, kind in _LINE_PARAMS.items():
            raw = request.query_params.get(name)
            if raw is None:
                continue
            try:
                event[name] = kind(raw)
            except ValueError as exc:
                detail = f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw[:40]!r}"
                raise RequestError(400, "validation", detail, name) from exc
        if "line_number" not in event:
            raise RequestError(400, "validation", "line_number is required", "line_number")
        async with self._held_body(request.headers.get("content-length"), request.receive) as body:
            with memoryview(body) as view:  # no copy of the body without its newline
                event["line"] = line_text(view[:-1] if body.endswith(b"\n") else view)
            del body
            return json_response(await self._ingest(run_id, _validate([event])))

    async def drain_margin(self, request: Request) -> Response:
        status, body, headers = self.drain_margin_answer(request.scope["query_string"])
        return json_response(body, status, dict(headers) if headers else None)

    def drain_margin_answer(self, query_string: bytes) -> LaneAnswer:
        """``GET /drain_margin``'s answer, refusals rendered: synchronous and cheap, so the
        connection's protocol answers it in the callback that read it (:mod:`sidecar._priority_lane`)."""
        try:
            return 200, dumps_json(self._drain_margin(QueryParams(query_string))), None
        except RequestError as exc:
            refusal = render_request_error(exc, dumps_json, self.service.metrics.on_error)
            return exc.status, refusal, exc.headers

    def _drain_margin(self, query: QueryParams) -> DrainMarginBody:
        run = self._run(query.get("run_id"))
        raw = query.get("configured")
        configured = run.config.drain_margin_s
        if raw is not None and raw not in ("", "null"):
            try:
                configured = float(raw)
            except ValueError as exc:
                raise RequestError(
                    400, "validation", f"configured must be a number, got {raw!r}", "configured"
                ) from exc
            if not (math.isfinite(configured) and 0 <= configured <= MAX_SECONDS):
                detail = f"configured must be in 0..{MAX_SECONDS:g}, got {raw!r}"
                raise RequestError(400, "validation", detail, "configured")
        return run.drain_margin(configured)

    async def metrics(self, request: Request) -> Response:
        accept = request.headers.get("accept") or ""
        registry = self.service.metrics.registry
        openmetrics = "application/openmetrics-text" in accept
        body, content_type = await self.service.reads.build(
            ("metrics", openmetrics), lambda: render(registry, accept)
        )
        return Response(body, media_type=content_type)

    async def report(self, request: Request) -> Response:
        run = self._run(request.query_params.get("run_id"))
        key = ("report", run.run_id, id(run))
        body = await self.service.reads.build(key, lambda: dumps_report(run.report()))
        return Response(body, media_type=_JSON)

    async def quality_summary(self, request: Request) -> Response:
        run = self._run(request.query_params.get("run_id"))
        summary = await self.service.reads.build(("summary", run.run_id, id(run)), run.reducer.summary_bytes)
        return Response(summary, media_type=_JSON)

    async def verdicts(self, request: Request) -> Response:
        run = self._run(request.query_params.get("run_id"))
        # a snapshot (later events must not tear the stream), taken off the loop
        lines = await self.service.reads.build(
            ("verdicts", run.run_id, id(run)), lambda: list(run.reducer.iter_verdict_lines())
        )

        async def stream() -> AsyncIterator[bytes]:
            for start in range(0, len(lines), 512):
                yield b"".join(lines[start : start + 512])

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    async def inflight(self, request: Request) -> Response:
        """Count, age distribution and the oldest ``limit`` in-flight rollouts (no payloads).

        After ``run_ended`` the answer is what was in flight at the end (``ended: true``).
        """
        run = self._run(request.path_params["run_id"])
        raw = request.query_params.get("limit", str(_INFLIGHT_DEFAULT_LIMIT))
        # ASCII digits only and few of them: int() refuses '²' and 5,000-digit strings.
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or int(raw) > _INFLIGHT_MAX_LIMIT:
            detail = f"limit must be an integer in 0..{_INFLIGHT_MAX_LIMIT}, got {raw[:40]!r}"
            raise RequestError(400, "validation", detail, "limit")
        if run.inflight_at_end is not None:
            body = dict(run.inflight_at_end)
            body["oldest"] = body["oldest"][: int(raw)]
            flags = run.inflight.flags  # this process's evaluations, kept after the end
            body["flagged"] = {"stragglers": flags.stragglers, "stalled": flags.stalls}
            ended: InflightBody = {"run_id": run.run_id, **body, "ended": True}  # type: ignore[typeddict-item]
            return _json(ended)
        now = self.service.clock()
        live: InflightBody = {**run.inflight_body(now, limit=int(raw)), "ended": False}  # type: ignore[typeddict-item]
        return _json(live)

    async def timeline(self, request: Request) -> Response:
        """The run's bounded time series, columnar (``docs/report.md``); frozen once it ended."""
        run = self._run(request.path_params["run_id"])
        return _json(run.timeline_body())

    async def runs(self, request: Request) -> Response:
        self._require_ready(counted=False)  # a listing, not ingest
        runs = self.service.ingestor.runs
        listing: RunListBody = {
            "runs": [
                {"run_id": rid, "ended": run.ended, "completed": run.completed} for rid, run in runs.items()
            ]
        }
        return _json(listing)

    async def openapi(self, request: Request) -> Response:
        return _json(openapi_document())

    async def healthz(self, request: Request) -> Response:
        alive: HealthzBody = {"status": "ok"}
        return _json(alive)

    async def readyz(self, request: Request) -> Response:
        service = self.service
        follower = service.follower.status() if service.follower is not None else None
        extra = {"follower": follower} if follower is not None else {}
        if not service.ready:
            status = "replay_failed" if service.replay_error is not None else "replaying"
            return _json({"status": status, **service.replay_progress, **extra}, 503)
        if not service.ingestor.journal_ok:
            return _json(
                {"status": "journal_unavailable", "detail": "the last journal append failed", **extra}, 503
            )
        if follower is not None and follower.get("state") == FollowerState.STOPPED:
            return _json({"status": "follower_stopped", **extra}, 503)
        ready: ReadyBody = {
            "status": "ready",
            "runs": len(service.ingestor.runs),
            "replayed": service.ingestor.replayed,
            **extra,  # type: ignore[typeddict-item]
        }
        return _json(ready)


class ServerTiming:
    """ASGI middleware adding ``Server-Timing: app;dur=<ms>`` (handler time, no network or queueing
    in the kernel), so latency seen by a client can be told apart from time spent in the service."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - started) * 1000.0
                message["headers"] = [*message.get("headers", ()), (b"server-timing", b"app;dur=%.3f" % took)]
            await send(message)

        await self.app(scope, receive, timed_send)


def create_app(service: Service) -> Starlette:
    """The ASGI app over ``service``; its lifespan starts the service if the runner has not."""
    handlers = _Handlers(service)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    async def events(request: Request) -> Response:
        """The ingest route as Starlette serves it, for a request the plain route passes on."""
        run_id = request.path_params["run_id"]
        return json_response(await handlers.events(run_id, request.scope["headers"], request.receive))

    render_error = functools.partial(render_request_error, dumps=dumps_json, count=service.metrics.on_error)
    routes = [
        Route("/v1/runs/{run_id}/events", events, methods=["POST"]),
        Route("/v1/runs/{run_id}/lines", handlers.lines, methods=["POST"]),
        Route("/v1/runs", handlers.runs, methods=["GET"]),
        Route("/v1/runs/{run_id}/inflight", handlers.inflight, methods=["GET"]),
        Route("/v1/runs/{run_id}/timeline", handlers.timeline, methods=["GET"]),
        Route("/drain_margin", handlers.drain_margin, methods=["GET"]),
        Route("/metrics", handlers.metrics, methods=["GET"]),
        Route("/report", handlers.report, methods=["GET"]),
        Route("/report/quality_summary.json", handlers.quality_summary, methods=["GET"]),
        Route("/report/verdicts", handlers.verdicts, methods=["GET"]),
        Route("/openapi.json", handlers.openapi, methods=["GET"]),
        Route("/healthz", handlers.healthz, methods=["GET"]),
        Route("/readyz", handlers.readyz, methods=["GET"]),
        *web_routes(service, handlers._run, dumps_json),  # the page (sidecar/web)
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _json(error_body("not_found", "path", f"no route {request.url.path}"), 404)

    internal_error = dumps_json(error_body("internal", None, "internal error; see the service log"))

    async def internal(request: Request, exc: Exception) -> Response:
        _log.error("unhandled error", path=request.url.path, error=type(exc).__name__)
        return json_response(internal_error, 500)

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _json(
            error_body(
                "method_not_allowed", "method", f"{request.method} is not allowed on {request.url.path}"
            ),
            405,
        )

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            RequestError: request_error_handler(dumps_json, service.metrics.on_error),
            404: not_found,
            405: not_allowed,
            Exception: internal,
        },
        middleware=[
            Middleware(
                PlainPostRoute, pattern=_EVENTS_PATH, handler=handlers.events, render_error=render_error
            ),
            Middleware(ServerTiming),
        ],
    )
    app.state.service = service
    #: What the server's protocol answers itself (``sidecar._priority_lane``).
    app.state.priority_lane = PriorityLane({b"/drain_margin": handlers.drain_margin_answer}, internal_error)
    return app
