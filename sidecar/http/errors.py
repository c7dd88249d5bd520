"""Request errors: raised where a request is refused, rendered and counted in one handler
(:func:`error_body` builds ``{"error", "field", "detail"}``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import structlog
from starlette.requests import Request
from starlette.responses import Response

from sidecar.http.json_bodies import dumps_json

__all__ = [
    "ErrorCode",
    "RequestError",
    "error_body",
    "json_response",
    "request_error_handler",
]

_log = structlog.get_logger("sidecar.http.app")
_JSON = "application/json"

#: The ``error`` codes of a refused request; each is also its ``ingest_errors_total`` reason.
ErrorCode = Literal[
    "validation",
    "invalid_json",
    "too_large",
    "too_deep",
    "unauthorized",
    "unknown_run",
    "journal_unavailable",
    "too_many_runs",
    "busy",
    "starting",
    "bad_request",
]


class RequestError(Exception):
    """A request the service refuses; ``reason``: what ``rollout_sidecar_ingest_errors_total``
    counts it under (``None``: neither counted nor logged)."""

    def __init__(
        self,
        status: int,
        error: ErrorCode,
        detail: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        *,
        counted: bool = True,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error: ErrorCode = error
        self.detail = detail
        self.field = field
        self.headers = headers
        self.reason: ErrorCode | None = error if counted else None


def json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


def error_body(error: str, field: str | None, detail: str) -> dict[str, Any]:
    """The one error body every refusal, unknown route and internal error answers with."""
    return {"error": error, "field": field, "detail": detail}


def request_error_handler(
    count: Callable[[str], None],
) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's handler for :class:`RequestError`: counts its reason, logs it, renders its body."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        if exc.reason is not None:
            count(exc.reason)
            _log.info("request rejected", reason=exc.reason, status=exc.status, field=exc.field)
        body = dumps_json(error_body(exc.error, exc.field, exc.detail))
        return json_response(body, exc.status, exc.headers)

    return handle
