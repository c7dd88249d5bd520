"""Realistic synthetic NeMo Gym rollout records, for tests, benchmarks and the demo.

Rows follow the collector's contract (``<name>.jsonl`` results, ``<name>_failures.jsonl``
failure rows, dropped drained results) and carry a valid ``ng_trajectory``: multi-turn agents
with tool calls, subagents and Responses-API conversations, ~8 KB of payload per model call.
Faults are injected at configured rates, one per row, each built to trigger one health check
(:data:`FAULT_CHECKS`). Output is a pure function of ``(config, seed)``.

Example::

    config = SyntheticConfig(num_tasks=500, repeats_per_task=4, faults=FaultRates.mixed(0.02))
    write_run_dir("runs/demo", config, seed=7)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from ._synthetic._config import FAULT_CHECKS, FaultRates, SyntheticConfig
from ._synthetic._durations import sample_task_seconds
from ._synthetic._schedule import EventKind, RolloutEvent, generate_events, rollout_event
from ._synthetic._writer import RunDirStats, materialized_rows, write_run_dir

__all__ = [
    "FAULT_CHECKS",
    "SAMPLE_RUN_CONFIG",
    "SAMPLE_RUN_SEED",
    "EventKind",
    "FaultRates",
    "RolloutEvent",
    "RunDirStats",
    "SyntheticConfig",
    "generate_events",
    "generate_failure_rows",
    "generate_rows",
    "materialized_rows",
    "rollout_event",
    "sample_task_seconds",
    "write_run_dir",
]

SAMPLE_RUN_CONFIG: Final = SyntheticConfig(
    num_tasks=10,
    repeats_per_task=4,
    model_calls_per_rollout=1,
    payload_bytes_per_call=64,
    faults=FaultRates.mixed(0.04),
    broken_task_fraction=0.1,
    failure_rate=0.1,
    model_call_capture=False,
    concurrency=8,
)
"""Configuration of the bundled ``sidecar/sample_run`` (small rows, every verdict represented)."""
SAMPLE_RUN_SEED: Final = 1217
"""Seed of the bundled ``sidecar/sample_run`` (picked so that every fault kind occurs)."""


def generate_rows(config: SyntheticConfig, seed: int) -> Iterator[dict[str, Any]]:
    """Result rows (what ``<name>.jsonl`` holds, minus torn lines) in completion order."""
    for event in generate_events(config, seed):
        if event.kind == "result" and event.row is not None:
            yield event.row


def generate_failure_rows(config: SyntheticConfig, seed: int) -> Iterator[dict[str, Any]]:
    """Failure rows (what ``<name>_failures.jsonl`` holds) in completion order."""
    for event in generate_events(config, seed):
        if event.kind == "failure" and event.row is not None:
            yield event.row
