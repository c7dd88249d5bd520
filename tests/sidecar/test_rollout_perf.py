"""The public face of the performance core: its exports and its import weight."""

from __future__ import annotations

import json
import subprocess
import sys

import sidecar.perf.rollout_perf as rollout_perf

EXPECTED_EXPORTS = [
    "ADAPTIVE_MARGIN_MIN_SAMPLES",
    "ADAPTIVE_MARGIN_QUANTILE",
    "DEFAULT_RATE_WINDOW_S",
    "DRAINED_FAILURE_CLASS",
    "NG_PERF_KEY",
    "NG_TRAJECTORY_KEY",
    "DispatchLatencyTracker",
    "LatencyPercentiles",
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
    assert rollout_perf.__all__ == EXPECTED_EXPORTS
    for name in EXPECTED_EXPORTS:
        assert getattr(rollout_perf, name) is not None, name
    assert rollout_perf.NG_PERF_KEY == "ng_perf"
    assert rollout_perf.ADAPTIVE_MARGIN_MIN_SAMPLES == 5
    assert rollout_perf.ADAPTIVE_MARGIN_QUANTILE == 0.75


def test_seed_signatures_accept_positional_and_keyword_arguments() -> None:
    row = {"ng_trajectory": {"task_id": "t", "rollout_id": "t-0", "invocations": [{"invocation_id": "r"}]}}
    assert rollout_perf.build_ng_perf(row, 3.0) == rollout_perf.build_ng_perf(row, rollout_latency_ms=3.0)
    rollout_perf.attach_ng_perf(row, True, 3.0)
    assert row["ng_perf"] == rollout_perf.build_ng_perf(row, 3.0)


def test_import_pulls_in_no_server_module() -> None:
    code = (
        "import json, sys\n"
        "import sidecar.perf.rollout_perf\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{SERVER_MODULES!r} or (m.startswith('sidecar.') and 'perf' not in m and m not in "
        "('sidecar.perf._tracker', 'sidecar.perf._drain', 'sidecar.perf._summation')))))"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(completed.stdout) == []
