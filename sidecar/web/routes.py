"""The page's routes: ``GET /``, ``GET /runs/{run_id}``, ``GET /static/{name}`` and the page's
JSON, ``GET /v1/runs/{run_id}/page``. Reads, so no token, as every read of the service.

The only module of :mod:`sidecar.web` that knows about the server; the saved-file writer and the
batch ``--html`` never import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidecar.http.errors import RequestError, json_response
from sidecar.http.json_bodies import dumps_json
from sidecar.web.data import live_body
from sidecar.web.page import ASSETS, LIVE_CSP, asset_bytes, index_html, run_html

if TYPE_CHECKING:
    from sidecar.http.service import Service
    from sidecar.state.run import RunState

__all__ = ["HTML_HEADERS", "web_routes"]

HTML_HEADERS: Final = {
    "Content-Security-Policy": LIVE_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_TYPES: Final = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def web_routes(
    service: Service, run_of: Callable[[str | None], RunState]
) -> list[Route]:
    """The routes, given the service and its run lookup (raising the 4xx :class:`RequestError`s of
    the other run routes)."""
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
        # Off the loop, as /metrics is: the health counts of a run with a duplicate identity are
        # the reducer's O(rollouts) summary (650 ms at 100k tasks, once per health interval).
        key = ("page", run.run_id, id(run))
        body = await service.reads.build(key, lambda: dumps_json(live_body(run, service.clock())))
        return json_response(body)

    return [
        Route("/", index, methods=["GET"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/v1/runs/{run_id}/page", page, methods=["GET"]),
    ]
