"""A NeMo Gym head server and agent server in one, on 127.0.0.1, for ``ng_collect_rollouts``.

``POST /run`` answers as the demo's fake agent (:func:`sidecar.demo.run.reply_for`): seeded
long-tailed durations, generated ``ng_trajectory`` rows with faults, request-level failures (HTTP
errors NeMo Gym turns into failure rows) and agent-reported ones (``_ng_failure_class`` replies).
Rows carry the generator's fixed timestamps, so two runs of one job write the same rows but for
what NeMo Gym measures itself. ``GET /global_config_dict_yaml`` is the head server's answer naming
that agent, so the real console script resolves and posts to it as in production. Also used by
``benchmarks/attach_overhead.py``.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidecar.demo.run import reply_for
from sidecar.http.server import ServerThread
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, rollout_event

__all__ = ["AGENT", "GymServers", "collect_command", "write_inputs"]

AGENT = "sidecar_probe_agent"
_ENVIRONMENT = "sidecar_probe_environment"


class GymServers(ServerThread):
    """``with GymServers(tasks, repeats, seed) as url:``. Task durations are the generator's simulated
    seconds divided by ``scale``; ``jobs`` > 1 holds every reply until requests of that many jobs
    (inputs written with distinct ``job`` numbers) have arrived, so the jobs run side by side."""

    def __init__(self, tasks: int, repeats: int, seed: int, *, scale: float = 600.0, jobs: int = 1) -> None:
        config = SyntheticConfig(
            num_tasks=tasks,
            repeats_per_task=repeats,
            model_calls_per_rollout=2,
            payload_bytes_per_call=256,
            faults=FaultRates.mixed(0.05),
            failure_rate=0.1,
            agent_name=AGENT,
        )
        super().__init__()
        self.jobs_seen: set[str] = set()
        #: ``time.monotonic()`` of the first request and of the last reply (the collection's span).
        self.first: float | None = None
        self.last: float | None = None
        #: Cleared, replies wait (the job just sees slower rollouts) until it is set again.
        self.replying = threading.Event()
        self.replying.set()
        everyone = asyncio.Event()

        async def run(request: Request) -> Response:
            received = time.monotonic()
            self.first = self.first or received
            row = orjson.loads(await request.body())
            self.jobs_seen.add(row["responses_create_params"]["input"][0]["content"].split()[0])
            if len(self.jobs_seen) >= jobs:
                everyone.set()
            await everyone.wait()
            task, rollout = int(row["_ng_task_index"]), int(row["_ng_rollout_index"])
            event = rollout_event(config, seed, task, rollout, int(row.get("_ng_attempt_index") or 0))
            seconds, status, body = reply_for(event.latency_seconds or 0.0, event.row or {}, 3600.0)
            await asyncio.sleep(max(0.0, seconds / scale - (time.monotonic() - received)))
            while not self.replying.is_set():  # noqa: ASYNC110 (set from the test's thread)
                await asyncio.sleep(0.01)
            self.last = time.monotonic()
            return Response(body, status_code=status, media_type="application/json")

        async def global_config(request: Request) -> Response:
            server = {"host": "127.0.0.1", "port": self.port, "entrypoint": "app.py"}
            environment = {**server, "agent_server": {"name": AGENT}}
            body = {
                AGENT: {"responses_api_agents": {AGENT: server}},
                _ENVIRONMENT: {"environment_servers": {_ENVIRONMENT: environment}},
            }
            return Response(orjson.dumps(body), media_type="application/json")

        self._app = Starlette(
            routes=[
                Route("/run", run, methods=["POST"]),
                Route("/global_config_dict_yaml", global_config, methods=["GET"]),
            ]
        )

    async def _serve(self, sock: socket.socket) -> None:
        config = uvicorn.Config(self._app, log_config=None, access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        await self._server.serve(sockets=[sock])


def write_inputs(path: Path, tasks: int, job: int = 0) -> Path:
    """One input row per task (NeMo Gym numbers tasks and repeats itself)."""
    lines = []
    for i in range(tasks):
        prompt = [{"role": "user", "content": f"job{job} task {i}"}]
        lines.append(
            orjson.dumps({"agent_ref": {"name": AGENT}, "responses_create_params": {"input": prompt}})
        )
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def collect_command(port: int, inputs: Path, output: Path, repeats: int, **options: Any) -> list[str]:
    """The real ``ng_collect_rollouts`` console script of this Python's environment, with Hydra overrides."""
    overrides = {
        "head_server.host": "127.0.0.1",
        "head_server.port": port,
        "input_jsonl_fpath": inputs,
        "output_jsonl_fpath": output,
        "num_repeats": repeats,
        "num_samples_in_parallel": 4,
        "route_failures_to_sidecar": True,
        "disable_aggregation": True,
        **options,
    }
    words = [
        f"++{key}={str(value).lower() if isinstance(value, bool) else value}"
        for key, value in overrides.items()
    ]
    return [str(Path(sys.executable).parent / "ng_collect_rollouts"), *words]
