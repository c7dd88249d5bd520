"""Pure performance core: dispatch latency tracker, per-rollout ``ng_perf`` and run-level ``perf_summary``.

Imported by ``dispatcher_client``, so it must stay light: pydantic, sortedcontainers, the standard
library and the shared ``health.contract`` models only, never the server.
"""

from __future__ import annotations

from sidecar._tracker import (
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
    "DispatchLatencyTracker",
    "LatencyPercentiles",
]
