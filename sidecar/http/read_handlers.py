"""The run-scoped reads and the probes; heavy bodies are built off the event loop (``service.reads``)."""

from __future__ import annotations

import functools
import math
from collections.abc import AsyncIterator
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from health.reduce import HealthReducer
from sidecar.export.metrics import render
from sidecar.http.errors import RequestError, json_response
from sidecar.http.json_bodies import dumps_json, dumps_report
from sidecar.http.openapi import openapi_document
from sidecar.http.responses import DrainMarginBody, HealthzBody, InflightBody, ReadyBody, RunListBody
from sidecar.http.service import Service
from sidecar.ingest.events import MAX_SECONDS
from sidecar.state.forecast import compute_forecast, forecast_input, stale, unforecast
from sidecar.state.run import RunState
from sidecar.wire import FollowerState

__all__ = ["ReadHandlers"]

_INFLIGHT_DEFAULT_LIMIT = 20
_INFLIGHT_MAX_LIMIT = 1000


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return json_response(dumps_json(body), status, headers)


def _limit(raw: str) -> int:
    """A ``limit`` query value in 0..1000, else the 400 naming it."""
    # ASCII digits only and few of them: int() refuses '²' and 5,000-digit strings.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or int(raw) > _INFLIGHT_MAX_LIMIT:
        detail = f"limit must be an integer in 0..{_INFLIGHT_MAX_LIMIT}, got {raw[:40]!r}"
        raise RequestError(400, "validation", detail, "limit")
    return int(raw)


class ReadHandlers:
    """The read routes over ``service``; :meth:`run_of` and :meth:`require_ready` are the checks
    every run-scoped route (the ingest routes and the page's too) starts with."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def run_of(self, run_id: str | None) -> RunState:
        self.require_ready()
        if not run_id:
            raise RequestError(400, "validation", "run_id is required", "run_id")
        run = self.service.ingestor.runs.get(run_id)
        if run is None:
            raise RequestError(404, "unknown_run", f"unknown run {run_id!r}", "run_id")
        return run

    def require_ready(self, *, counted: bool = True) -> None:
        """Run-scoped requests wait for the journal replay (run state is being rebuilt)."""
        if not self.service.ready:
            progress = self.service.replay_progress
            done = progress["snapshot_seq"] + progress["replayed"]
            detail = f"replaying the journal ({done} of {progress['journal_events']} events); retry"
            raise RequestError(503, "starting", detail, None, {"Retry-After": "1"}, counted=counted)

    async def drain_margin(self, request: Request) -> Response:
        return _json(self._drain_margin(request.query_params))

    def _drain_margin(self, query: QueryParams) -> DrainMarginBody:
        run = self.run_of(query.get("run_id"))
        raw = query.get("configured")
        configured = run.config.drain_margin_s
        if raw is not None and raw not in ("", "null"):
            try:
                configured = float(raw)
            except ValueError as exc:
                detail = f"configured must be a number, got {raw!r}"
                raise RequestError(400, "validation", detail, "configured") from exc
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
        run = self.run_of(request.query_params.get("run_id"))
        return json_response(
            await self.service.reads.build_from_cut(run.report_cut, lambda cut: dumps_report(cut.report()))
        )

    async def quality_summary(self, request: Request) -> Response:
        run = self.run_of(request.query_params.get("run_id"))
        summary = await self.service.reads.build_from_cut(run.reducer.cut, HealthReducer.summary_bytes)
        return json_response(summary)

    async def verdicts(self, request: Request) -> Response:
        run = self.run_of(request.query_params.get("run_id"))
        # a cut (later events must not tear the stream), read off the loop while ingest goes on
        lines = await self.service.reads.build_from_cut(
            run.reducer.cut, lambda cut: list(cut.iter_verdict_lines())
        )

        async def stream() -> AsyncIterator[bytes]:
            for start in range(0, len(lines), 512):
                yield b"".join(lines[start : start + 512])

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    async def inflight(self, request: Request) -> Response:
        """Count, ages and the oldest ``limit`` in-flight rollouts (after ``run_ended``: at the end)."""
        run = self.run_of(request.path_params["run_id"])
        limit = _limit(request.query_params.get("limit", str(_INFLIGHT_DEFAULT_LIMIT)))
        if run.inflight_at_end is not None:
            body = dict(run.inflight_at_end)
            body["oldest"] = body["oldest"][:limit]
            flags = run.inflight.flags  # this process's evaluations, kept after the end
            body["flagged"] = {"stragglers": flags.stragglers, "stalled": flags.stalls}
            ended: InflightBody = {"run_id": run.run_id, **body, "ended": True}  # type: ignore[typeddict-item]
            return _json(ended)
        now = self.service.clock()

        def encoded() -> bytes:  # O(limit) entries, built and encoded off the loop
            live: InflightBody = {**run.inflight_body(now, limit=limit), "ended": False}  # type: ignore[typeddict-item]
            return dumps_json(live)

        live = await self.service.reads.build(("inflight", run.run_id, id(run), limit, now), encoded)
        return json_response(live)

    async def forecast(self, request: Request) -> Response:
        """The run's end forecast (``docs/http-api.md``): built from a bounded cut on a worker
        thread, at most every ``forecast.REFRESH_S`` seconds (requests in between get the last one)."""
        run = self.run_of(request.path_params["run_id"])
        memo, now = run.forecast, self.service.clock()
        if run.ended and memo.body is None:
            return _json(unforecast(forecast_input(run, now), "the run ended before a forecast was made"))
        if stale(run):
            cut = functools.partial(forecast_input, run, now)  # under the ingest pause, then a thread
            memo.keep(await self.service.reads.build_from_cut(cut, compute_forecast))
        return _json(memo.body)

    async def groups(self, request: Request) -> Response:
        """The open task groups waiting longest on a repeat in flight (at most ``limit``)."""
        run = self.run_of(request.path_params["run_id"])
        limit = _limit(request.query_params.get("limit", str(_INFLIGHT_DEFAULT_LIMIT)))
        now, open_groups = self.service.clock(), run.groups

        def build() -> dict[str, Any]:
            listed = open_groups.blocking(now, limit, run.plan)
            return {"run_id": run.run_id, "as_of": now, "open": len(open_groups),
                    "untracked": open_groups.untracked, "groups": listed}  # fmt: skip

        return _json(await self.service.reads.build(("groups", run.run_id, id(run), limit, now), build))

    async def timeline(self, request: Request) -> Response:
        """The run's bounded time series, columnar (``docs/report.md``); frozen once it ended."""
        run = self.run_of(request.path_params["run_id"])
        return _json(run.timeline_body())

    async def runs(self, request: Request) -> Response:
        self.require_ready(counted=False)  # a listing, not ingest
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
