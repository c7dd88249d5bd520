"""NeMo Gym's own ``RolloutCollectionHelper`` dispatches with ``RemoteLatencyTracker`` against a sidecar.

This runs only where NeMo Gym itself is installed beside this project: ``.ci/nemo_gym.sh`` builds
that environment (Python 3.13, ``nemo-gym==0.7.0`` and this project resolved together, ``pip check``
clean) and runs this file in it. Elsewhere it is skipped with that reason.

Nothing of NeMo Gym is stood in for: its helper resolves the agent through the global config a head
server serves, posts each row to the agent's ``/run``, applies the dispatch budget and calls the
tracker. Only the two servers it talks to are ours, small stdlib HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

nemo_collection = pytest.importorskip(
    "nemo_gym.rollout_collection",
    reason="NeMo Gym is not installed here; .ci/nemo_gym.sh runs this in a venv beside it",
)

from dispatcher_client import RemoteLatencyTracker  # noqa: E402

AGENT = "sidecar_probe_agent"
ENVIRONMENT = "sidecar_probe_environment"
ROWS = 24
#: Short enough that the budget runs out part-way: NeMo Gym drains the rest through the tracker.
BUDGET_S = 0.6


class _Servers:
    """A head server (the global config) and an agent server (``/run``) on one loopback port."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        servers = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def _answer(self, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/global_config_dict_yaml":
                    self._answer(servers.global_config())
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with servers._lock:
                    servers.runs.append(body)
                # A long-tailed agent: most rollouts are quick, a few take a while.
                time.sleep(random.Random(len(servers.runs)).choice([0.05, 0.1, 0.15, 0.3]))
                self._answer({"reward": 1.0, "response": {"output": [], "usage": None}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def global_config(self) -> dict[str, Any]:
        """An agent and the environment server in front of it, both answered by this server."""
        server = {"host": "127.0.0.1", "port": self.port, "entrypoint": "app.py"}
        environment = {**server, "agent_server": {"name": AGENT}}
        return {
            AGENT: {"responses_api_agents": {AGENT: server}},
            ENVIRONMENT: {"environment_servers": {ENVIRONMENT: environment}},
        }

    def __enter__(self) -> _Servers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[_Servers]:
    with _Servers() as s:
        yield s


@pytest.fixture
def sidecar_url(tmp_path: Path) -> Iterator[str]:
    """The installed ``rollout-sidecar serve`` (this venv's, not the source tree's) on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "sidecar.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--journal", str(tmp_path / "journal.sqlite")]
    log = (tmp_path / "sidecar.log").open("wb")
    child = subprocess.Popen(argv, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/readyz").status_code != 200 if _listening(port) else True:
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "sidecar.log").read_text()[-2000:])
            time.sleep(0.1)
        yield url
    finally:
        child.terminate()
        child.wait(timeout=30)
        log.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _examples() -> list[dict[str, Any]]:
    return [
        {
            "_ng_task_index": i // 2,
            "_ng_rollout_index": i % 2,
            "agent_ref": {"name": AGENT},
            "responses_create_params": {"input": [{"role": "user", "content": f"task {i // 2}"}]},
        }
        for i in range(ROWS)
    ]


async def _collect(servers: _Servers, tracker: RemoteLatencyTracker) -> list[tuple[dict, dict]]:
    from nemo_gym.config_types import BaseServerConfig

    helper = nemo_collection.RolloutCollectionHelper()
    head = BaseServerConfig(host="127.0.0.1", port=servers.port)
    futures = helper.run_examples(
        _examples(),
        head,
        semaphore=asyncio.Semaphore(4),
        dispatch_budget_s=BUDGET_S,
        latency_tracker=tracker,
    )
    return [await future for future in futures]


def test_nemo_gym_dispatches_through_the_remote_tracker(servers: _Servers, sidecar_url: str) -> None:
    import sidecar

    assert "site-packages" in sidecar.__file__, f"not the installed package: {sidecar.__file__}"
    tracker = RemoteLatencyTracker(sidecar_url, run_id="nemo-gym-env", dispatch_budget_s=BUDGET_S)
    results = asyncio.run(_collect(servers, tracker))
    assert tracker.flush(timeout_s=30), "the tracker could not hand its samples to the sidecar"
    local_margin = tracker.drain_margin(None)
    local_p50 = tracker.quantile(0.5)
    tracker.close()

    drained = [result for _, result in results if result.get("_ng_dispatch_drained")]
    ran = [result for _, result in results if not result.get("_ng_dispatch_drained")]
    assert len(results) == ROWS and len(ran) == len(servers.runs) >= 4
    assert drained, "the budget never ran out: no drain went through the tracker"
    assert all(result.get("reward") == 1.0 for result in ran)
    # NeMo Gym called record() once per rollout it ran and record_drained() once per row it drained;
    # the sidecar got every call and answers the p75 drain margin the in-process tracker answers.
    drain = httpx.get(f"{sidecar_url}/drain_margin", params={"run_id": "nemo-gym-env"}).json()
    assert (drain["samples"], drain["drained"]) == (len(ran), len(drained)), drain
    assert drain["drain_margin"] == (None if local_margin is None else pytest.approx(local_margin))
    assert local_p50 is not None and 0.05 <= local_p50 < 1.0
