"""Pure performance core: dispatch latency tracker, per-rollout ``ng_perf`` and run-level ``perf_summary``.

Imported by ``dispatcher_client``, so it stays light: pydantic, sortedcontainers, the standard
library and the shared ``health.contract`` models, never the server. The pieces live in private
modules; this is the one public import path.
"""

from __future__ import annotations

from sidecar.perf._drain import DRAINED_FAILURE_CLASS, drained_result, should_drain
from sidecar.perf._ng_perf import (
    NG_PERF_KEY,
    NG_TRAJECTORY_KEY,
    attach_ng_perf,
    build_ng_perf,
    ng_perf_for_trajectory,
)
from sidecar.perf._perf_summary import PerfSummaryState, compute_perf_summary
from sidecar.perf._tracker import (
    ADAPTIVE_MARGIN_MIN_SAMPLES,
    ADAPTIVE_MARGIN_QUANTILE,
    DEFAULT_RATE_WINDOW_S,
    DispatchLatencyTracker,
    LatencyPercentiles,
)

__all__ = [
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
