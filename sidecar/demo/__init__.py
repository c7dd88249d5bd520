"""``rollout-sidecar demo``: the whole mission on one machine in under a minute.

A real sidecar service, a fake agent server with long-tailed task durations, faults and
failures (:mod:`~sidecar.demo.agent_server`), and a NeMo-Gym-shaped dispatcher that reports
through ``dispatcher_client`` and stops dispatching when the drain margin exceeds the time left
in its budget (:mod:`~sidecar.demo.dispatcher`), with a live view (:mod:`~sidecar.demo.display`).
:func:`sidecar.demo.run.run_demo` runs it all. Time runs on a compressed clock
(:class:`TimeScale`, one simulated minute per 0.1 s by default).

Only the configuration is exported here, so the CLI can build its parser without importing
the servers.
"""

from __future__ import annotations

from sidecar.demo.config import DemoConfig, DemoConfigError, SimClock, TimeScale

__all__ = ["DemoConfig", "DemoConfigError", "SimClock", "TimeScale"]
