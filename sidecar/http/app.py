"""The HTTP surface: the route table, error handlers and middleware (``create_app``); every
refusal is a :class:`~sidecar.http.errors.RequestError` rendered by one handler."""

from __future__ import annotations

import base64
import binascii
import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sidecar.http.errors import RequestError, error_body, json_response, request_error_handler
from sidecar.http.ingest_handlers import IngestHandlers
from sidecar.http.json_bodies import dumps_json
from sidecar.http.read_handlers import ReadHandlers
from sidecar.http.service import Service
from sidecar.web.routes import web_routes

__all__ = [
    "ReadAuth",
    "ServerTiming",
    "create_app",
]

_log = structlog.get_logger("sidecar.http.app")


class ReadAuth:
    """With ``--read-token-file``, every read but the probes needs the read or ingest token
    (bearer, or HTTP Basic's password for a browser); writes check theirs in their handlers."""

    def __init__(self, app: ASGIApp, *, tokens: tuple[bytes, ...], open_paths: frozenset[str]) -> None:
        self.app = app
        self.tokens = tokens
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("GET", "HEAD")
            or scope["path"] in self.open_paths
            or self._allowed(scope)
        ):
            await self.app(scope, receive, send)
            return
        body = dumps_json(error_body("unauthorized", "authorization", "a valid read token is required"))
        headers = {"WWW-Authenticate": 'Basic realm="rollout-sidecar", charset="UTF-8"'}
        await json_response(body, 401, headers)(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        header = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        scheme, _, given = header.partition(b" ")
        if scheme.lower() == b"basic":
            try:
                given = base64.b64decode(given.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return False
        elif scheme.lower() != b"bearer":
            return False
        return any(hmac.compare_digest(given.strip(), token) for token in self.tokens)


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


def _read_auth(service: Service) -> list[Middleware]:
    settings = service.settings
    if settings.read_token is None:
        return []
    tokens = tuple(secret.get().encode() for secret in (settings.read_token, settings.token) if secret)
    open_paths = {"/healthz", "/readyz", *(("/metrics",) if settings.open_metrics else ())}
    return [Middleware(ReadAuth, tokens=tokens, open_paths=frozenset(open_paths))]


def create_app(service: Service) -> Starlette:
    """The ASGI app over ``service``; its lifespan starts the service if the runner has not."""
    reads = ReadHandlers(service)
    ingest = IngestHandlers(service, reads.require_ready)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    routes = [
        Route("/v1/runs/{run_id}/events", ingest.events, methods=["POST"]),
        Route("/v1/runs/{run_id}/lines", ingest.lines, methods=["POST"]),
        Route("/v1/runs", reads.runs, methods=["GET"]),
        Route("/v1/runs/{run_id}/inflight", reads.inflight, methods=["GET"]),
        Route("/v1/runs/{run_id}/timeline", reads.timeline, methods=["GET"]),
        Route("/v1/runs/{run_id}/forecast", reads.forecast, methods=["GET"]),
        Route("/v1/runs/{run_id}/groups", reads.groups, methods=["GET"]),
        Route("/drain_margin", reads.drain_margin, methods=["GET"]),
        Route("/metrics", reads.metrics, methods=["GET"]),
        Route("/report", reads.report, methods=["GET"]),
        Route("/report/quality_summary.json", reads.quality_summary, methods=["GET"]),
        Route("/report/verdicts", reads.verdicts, methods=["GET"]),
        Route("/openapi.json", reads.openapi, methods=["GET"]),
        Route("/healthz", reads.healthz, methods=["GET"]),
        Route("/readyz", reads.readyz, methods=["GET"]),
        *web_routes(service, reads.run_of),  # the page (sidecar/web)
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return json_response(dumps_json(error_body("not_found", "path", f"no route {request.url.path}")), 404)

    internal_error = dumps_json(error_body("internal", None, "internal error; see the service log"))

    async def internal(request: Request, exc: Exception) -> Response:
        _log.error("unhandled error", path=request.url.path, error=type(exc).__name__)
        return json_response(internal_error, 500)

    async def not_allowed(request: Request, exc: Exception) -> Response:
        body = error_body(
            "method_not_allowed", "method", f"{request.method} is not allowed on {request.url.path}"
        )
        return json_response(dumps_json(body), 405)

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            RequestError: request_error_handler(service.metrics.on_error),
            404: not_found,
            405: not_allowed,
            Exception: internal,
        },
        middleware=[*_read_auth(service), Middleware(ServerTiming)],
    )
    app.state.service = service
    return app
