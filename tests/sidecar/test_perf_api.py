"""The public face of the performance core: its exports and its import weight."""

from __future__ import annotations

import json
import subprocess
import sys

import sidecar.perf as perf

EXPECTED_EXPORTS = [
    "DRAINED_FAILURE_CLASS",
    "NG_PERF_KEY",
    "DispatchLatencyTracker",
    "PerfSummaryState",
    "attach_ng_perf",
    "build_ng_perf",
    "compute_perf_summary",
    "drained_result",
    "ng_perf_for_trajectory",
    "should_drain",
]

# What a dispatcher must not pull in by importing the tracker: the server and its stack.
SERVER_MODULES = (
    "starlette",
    "uvicorn",
    "prometheus_client",
    "httpx",
    "anyio",
    "structlog",
    "sqlite3",
    "rich",
)


def test_exports() -> None:
    assert perf.__all__ == EXPECTED_EXPORTS
    for name in EXPECTED_EXPORTS:
        assert getattr(perf, name) is not None, name
    assert perf.NG_PERF_KEY == "ng_perf"
    assert perf.DRAINED_FAILURE_CLASS == "cancelled"


def test_seed_signatures_accept_positional_and_keyword_arguments() -> None:
    row = {"ng_trajectory": {"task_id": "t", "rollout_id": "t-0", "invocations": [{"invocation_id": "r"}]}}
    assert perf.build_ng_perf(row, 3.0) == perf.build_ng_perf(row, rollout_latency_ms=3.0)
    perf.attach_ng_perf(row, True, 3.0)
    assert row["ng_perf"] == perf.build_ng_perf(row, 3.0)


def test_import_pulls_in_no_server_module() -> None:
    code = (
        "import json, sys\n"
        "import sidecar.perf\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{SERVER_MODULES!r} or (m.startswith('sidecar.') and not m.startswith('sidecar.perf')))))"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(completed.stdout) == []
