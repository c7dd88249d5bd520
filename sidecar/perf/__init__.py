"""The pure perf core: latency tracker, drain margin, ``ng_perf`` and its summary, exact sums.

No I/O and no server: ``dispatcher_client`` computes its local fallbacks with it, the service
keeps one per run. Its public API is :mod:`sidecar.perf.rollout_perf` (re-exporting here would make
importing any one piece load them all: the client imports only what it needs).
"""

__all__: list[str] = []
