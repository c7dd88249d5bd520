"""A fake NeMo Gym agent server on loopback: ``POST /run`` sleeps a task's duration, then replies.

Each reply is the synthetic generator's row for that attempt (:func:`sidecar.demo.synthetic.rollout_event`),
so trajectories are real ``ng_trajectory`` records with the generator's faults, broken tasks and
failures. How a failure reaches the dispatcher depends on who reports it, as with a real agent:

* a request-level failure (the generator's ``agent_request_failed`` / ``agent_run_error`` rows)
  is an HTTP error status with a short body; the dispatcher builds the failure row itself;
* an agent-reported failure (``timeout_exceeded``, ``environment_server_failed``) is a normal
  200 reply whose row carries ``_ng_failure_class``;
* a task longer than the timeout is cut at the timeout with a ``timeout_exceeded`` reply.

Durations are simulated seconds; the server sleeps their real equivalent (:class:`TimeScale`).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any, Final

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidecar.demo.config import TimeScale
from sidecar.demo.synthetic import RolloutEvent, SyntheticConfig, rollout_event
from sidecar.http.server_thread import ServerThread, ServerThreadError

__all__ = ["REQUEST_FAILURE_CLASSES", "AgentServer", "AgentServerError", "create_agent_app", "reply_for"]

REQUEST_FAILURE_CLASSES: Final = frozenset({"agent_request_failed", "agent_run_error"})
"""Failure classes NeMo Gym builds itself from a ``/run`` that raised: served as HTTP errors."""
_JSON = "application/json"


class AgentServerError(ServerThreadError):
    """The fake agent server could not start or stopped with an error."""


def _timeout_row(event: RolloutEvent, timeout_s: float) -> dict[str, Any]:
    return {
        "reward": 0.0,
        "failure_reason": f"rollout exceeded its {timeout_s:.0f}s timeout",
        "elapsed_seconds": round(timeout_s, 3),
        "_ng_failure_class": "timeout_exceeded",
        "_ng_failure_terminal": False,
        "_ng_task_index": event.task_index,
        "_ng_rollout_index": event.rollout_index,
    }


def reply_for(event: RolloutEvent, timeout_s: float) -> tuple[float, int, bytes]:
    """``(simulated seconds, HTTP status, body)`` the agent answers for one generated attempt."""
    seconds = event.latency_seconds or 0.0
    if seconds > timeout_s:
        return timeout_s, 200, orjson.dumps(_timeout_row(event, timeout_s))
    row = event.row if event.row is not None else {}
    failure_class = row.get("_ng_failure_class")
    if event.kind == "failure" and failure_class in REQUEST_FAILURE_CLASSES:
        status = row.get("_ng_failure_http_status")
        body = row.get("_ng_failure_response_body") or "upstream unavailable"
        return seconds, status if isinstance(status, int) else 503, str(body).encode()
    return seconds, 200, orjson.dumps(row)


def create_agent_app(
    config: SyntheticConfig,
    seed: int,
    scale: TimeScale,
    timeout_s: float,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The ASGI app: ``POST /run`` with a dispatched row (its ``_ng_*`` index keys), ``GET /healthz``.
    ``clock``: the wall clock the rows' trajectories are stamped by (the demo's simulated one)."""

    async def run(request: Request) -> Response:
        received = time.monotonic()
        try:
            row = orjson.loads(await request.body())
            task, rollout = int(row["_ng_task_index"]), int(row["_ng_rollout_index"])
            attempt = int(row.get("_ng_attempt_index") or 0)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            detail = f"a dispatched row with integer _ng_task_index and _ng_rollout_index is needed: {exc!r}"
            return Response(orjson.dumps({"error": detail}), status_code=422, media_type=_JSON)
        event = rollout_event(config, seed, task, rollout, attempt, started_at=clock())
        seconds, status, body = reply_for(event, timeout_s)
        await asyncio.sleep(max(0.0, scale.to_real(seconds) - (time.monotonic() - received)))
        media = _JSON if status == 200 else "text/plain"
        return Response(body, status_code=status, media_type=media)

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    routes = [Route("/run", run, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])]
    return Starlette(routes=routes)


class AgentServer(ServerThread):
    """The fake agent server on ``127.0.0.1:<ephemeral>`` in its own thread and event loop.

    ``with AgentServer(...) as url:`` starts it and, on exit, stops it and joins the thread. Its
    own loop keeps reply timing independent of the dispatcher's load.
    """

    label = "fake agent server"

    def __init__(
        self,
        config: SyntheticConfig,
        seed: int,
        scale: TimeScale,
        timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        super().__init__()
        self._app = create_agent_app(config, seed, scale, timeout_s, clock)

    async def _serve(self, sock: socket.socket) -> None:
        self._server = uvicorn.Server(
            uvicorn.Config(
                self._app,
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
                server_header=False,
            )
        )
        await self._server.serve(sockets=[sock])

    def start(self, timeout: float = 15.0) -> str:
        try:
            return super().start(timeout)
        except ServerThreadError as exc:
            raise AgentServerError(str(exc)) from exc.__cause__

    def stop(self, timeout: float = 15.0) -> None:
        try:
            super().stop(timeout)
        except ServerThreadError as exc:
            raise AgentServerError(str(exc)) from exc.__cause__
