"""The page's routes: ``GET /``, ``GET /runs/{run_id}``, ``GET /static/{name}`` and the page's
JSON, ``GET /v1/runs/{run_id}/page``. Reads, so no token, as every read of the service.

The only module of :mod:`sidecar.web` that knows about the server; the saved-file writer and the
batch ``--html`` never import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidecar.http.errors import RequestError
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
_PERF_MIN_REFRESH_S: Final = 2.0
_PERF_HELD_MAX: Final = 1024
_PERF_WAIT_S: Final = 0.25


class _PerfCache:
    """Per run, NeMo Gym's perf summary for the page, rebuilt at most every 20x its own cost.

    The perf core keeps the summary as rows arrive, so reading it is cheap; it is read under the
    ingest pause with the run's rollout count (one cut), and the answer is held per run: a
    request answers with the summary held so far and ``perf_pending``, and only before the first
    waits for it, at most :data:`_PERF_WAIT_S`. A finished run's is built once.
    """

    def __init__(self, service: Service) -> None:
        self._service = service
        self._held: dict[tuple[str, int], tuple[int, float, float, Any]] = {}
        self._building: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._one_at_a_time = asyncio.Lock()  # builds of several runs' pages take turns, as before

    @staticmethod
    def _compute(taken: tuple[int, Any]) -> tuple[int, Any]:
        return taken

    async def _build(self, key: tuple[str, int], run: RunState) -> None:
        try:
            async with self._one_at_a_time:
                began = time.perf_counter()
                count, value = await self._service.reads.build_from_cut(
                    lambda: (run.perf_rollouts, run.perf.result(run.perf_rollouts)), self._compute
                )
                refresh = max(_PERF_MIN_REFRESH_S, 20 * (time.perf_counter() - began))
            if len(self._held) >= _PERF_HELD_MAX:
                self._held.clear()
            self._held[key] = (count, time.monotonic(), refresh, value)
        finally:
            self._building.pop(key, None)

    async def get(self, run: RunState) -> tuple[Any, int | None, bool]:
        """``(summary, rollouts it covers, a newer one is being built)``."""
        key = (run.run_id, id(run))
        count = run.perf_rollouts
        held = self._held.get(key)
        if held is None or (held[0] != count and time.monotonic() >= held[1] + held[2]):
            task = self._building.get(key)
            if task is None:
                task = self._building[key] = asyncio.create_task(self._build(key, run))
            if held is None:  # nothing to show yet: a small run's first build is quicker than a poll
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), _PERF_WAIT_S)
                held = self._held.get(key)
        pending = key in self._building
        return (held[3], held[0], pending) if held is not None else (None, None, pending)


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
        summary, over, pending = await perf.get(run)
        # Off the loop, as /metrics is: the health counts of a run with a duplicate identity are
        # the reducer's O(rollouts) summary (650 ms at 100k tasks, once per health interval).
        key = ("page", run.run_id, id(run), id(summary), over)
        body = await service.reads.build(key, lambda: live_body(run, service.clock(), summary, over))
        return Response(dumps({**body, "perf_pending": pending}), media_type="application/json")

    return [
        Route("/", index, methods=["GET"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/v1/runs/{run_id}/page", page, methods=["GET"]),
    ]
