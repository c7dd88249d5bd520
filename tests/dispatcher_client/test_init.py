"""The package a dispatcher imports stays light: it loads the contract models, never the server
or the batch health check (``benchmarks/client_overhead.py --phase import`` times it)."""

from __future__ import annotations

import subprocess
import sys

import orjson

from .support import REPO_ROOT

SERVER = ("starlette", "uvicorn", "prometheus_client", "structlog", "sqlite3", "_sqlite3")
#: The batch side of ``health``: the runner, the reducer, the report writers, the per-record step.
BATCH = ("health.api", "health.runner", "health.reduce", "health.report", "health.digest", "health.jsonl")

#: The pure perf core the client computes its local fallbacks with.
PERF_CORE = ("sidecar.perf",)


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys, orjson\n{statement}\nsys.stdout.buffer.write(orjson.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, check=True, timeout=60
    )
    return set(orjson.loads(out.stdout))


def test_importing_the_client_never_loads_the_server() -> None:
    loaded = _loaded_after("import dispatcher_client, dispatcher_client.follow")
    assert not loaded & set(SERVER), f"dispatcher_client imported server modules: {loaded & set(SERVER)}"


def test_importing_the_client_loads_only_the_contract_of_health() -> None:
    loaded = _loaded_after("import dispatcher_client")
    assert not loaded & set(BATCH), f"dispatcher_client imported the batch check: {loaded & set(BATCH)}"
    assert "health.contract.models" in loaded  # the perf core reads trajectories through it
    ours = {name for name in loaded if name.split(".")[0] in ("health", "sidecar")}
    allowed = ("health.contract", "sidecar.wire", *PERF_CORE)
    # the packages themselves, and what ``health/__init__`` needs to export lazily
    packages = {"health", "health.lazy_exports", "sidecar"}
    assert {name for name in ours if not name.startswith(allowed)} == packages, sorted(ours)


def test_the_health_package_still_exports_its_api_on_access() -> None:
    loaded = _loaded_after("import health; health.HealthReducer; health.check_rollout_files")
    assert {"health.reduce", "health.api"} <= loaded
