"""The page's routes: ``GET /``, ``GET /runs/{run_id}``, ``GET /static/{name}`` and the page's
JSON, ``GET /v1/runs/{run_id}/page``. Reads, so no token, as every read of the service.

The only module of :mod:`sidecar.web` that knows about the server; the saved-file writer and the
batch ``--html`` never import it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidecar.request_errors import RequestError
from sidecar.web.data import live_body
from sidecar.web.page import ASSETS, LIVE_CSP, asset_bytes, index_html, run_html

if TYPE_CHECKING:
    from sidecar.runs import RunState
    from sidecar.service import Service

__all__ = ["HTML_HEADERS", "web_routes"]

HTML_HEADERS: Final = {
    "Content-Security-Policy": LIVE_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_TYPES: Final = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_PERF_MIN_REFRESH_S: Final = 2.0
_PERF_HELD_MAX: Final = 1024


class _PerfCache:
    """Per run, NeMo Gym's perf summary for the page, rebuilt at most every 20x its own cost.

    The summary sorts every rollout's figures (~0.4 s at 100k rollouts), unlike the rest of the
    page body; ten pages polling every 2 s must not recompute it on each poll. A finished run's
    is built once. Built off the loop, serialized with ingest, like ``/report``.
    """

    def __init__(self, service: Service) -> None:
        self._service = service
        self._held: dict[tuple[str, int], tuple[int, float, float, Any]] = {}

    async def get(self, run: RunState) -> tuple[Any, int]:
        key = (run.run_id, id(run))
        count = run.perf_rollouts
        held = self._held.get(key)
        now = time.monotonic()
        if held is not None and (held[0] == count or now < held[1] + held[2]):
            return held[3], held[0]
        began = time.perf_counter()
        value = await self._service.reads.build(("page-perf", *key, count), lambda: run.perf.result(count))
        refresh = max(_PERF_MIN_REFRESH_S, 20 * (time.perf_counter() - began))
        if len(self._held) >= _PERF_HELD_MAX:
            self._held.clear()
        self._held[key] = (count, now, refresh, value)
        return value, count


def web_routes(
    service: Service, run_of: Callable[[str | None], RunState], dumps: Callable[[Any], bytes]
) -> list[Route]:
    """The routes, given the service, its run lookup (raising the 4xx :class:`RequestError`s of
    the other run routes) and its JSON encoder."""
    perf = _PerfCache(service)

    async def index(request: Request) -> Response:
        return Response(index_html(), media_type="text/html; charset=utf-8", headers=HTML_HEADERS)

    async def run_page(request: Request) -> Response:
        run = run_of(request.path_params["run_id"])  # 404 for a run the service does not hold
        return Response(run_html(run.run_id), media_type="text/html; charset=utf-8", headers=HTML_HEADERS)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            raise RequestError(404, "bad_request", f"no static file {name[:80]!r}", "path")
        suffix = name[name.rfind(".") :]
        return Response(
            asset_bytes(name),
            media_type=_TYPES.get(suffix, "text/plain; charset=utf-8"),
            headers={"Cache-Control": "public, max-age=300", "X-Content-Type-Options": "nosniff"},
        )

    async def page(request: Request) -> Response:
        run = run_of(request.path_params["run_id"])
        summary, over = await perf.get(run)
        return Response(dumps(live_body(run, service.clock(), summary, over)), media_type="application/json")

    return [
        Route("/", index, methods=["GET"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/v1/runs/{run_id}/page", page, methods=["GET"]),
    ]
