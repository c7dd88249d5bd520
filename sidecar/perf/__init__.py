"""The pure perf core: NeMo Gym's latency tracker and drain decision, ``ng_perf`` and its run summary.

No I/O, no server, light to import (pydantic, sortedcontainers, the standard library and the
``health.contract`` models): the service keeps one tracker and one summary per run, and
``dispatcher_client`` answers its local fallbacks with it.
"""

from sidecar.perf._ng_perf import NG_PERF_KEY, attach_ng_perf, build_ng_perf, ng_perf_for_trajectory
from sidecar.perf._summary import PerfSummaryState, compute_perf_summary
from sidecar.perf._tracker import DRAINED_FAILURE_CLASS, DispatchLatencyTracker, drained_result, should_drain

__all__ = [
    "DRAINED_FAILURE_CLASS", "NG_PERF_KEY", "DispatchLatencyTracker", "PerfSummaryState", "attach_ng_perf",
    "build_ng_perf", "compute_perf_summary", "drained_result", "ng_perf_for_trajectory", "should_drain",
]
