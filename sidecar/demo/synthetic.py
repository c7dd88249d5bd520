"""Realistic synthetic NeMo Gym rollout records, for tests, benchmarks and the demo.

Rows follow the collector's contract (``<name>.jsonl`` results, ``<name>_failures.jsonl``
failure rows, drained results that are never written) and carry a valid ``ng_trajectory``:
multi-turn agents with tool calls, subagents and Responses-API conversations, in the Responses
or chat-completions dialect, ~8 KB per model call. Everything is a pure function of
``(config, seed)``, and each row of a function of ``(seed, identity)`` only.

Entry points:

* :func:`generate_events`: every finished dispatch in completion order (results, failure rows,
  drained results, torn lines), with its simulated timing; what a dispatcher would push.
* :func:`generate_rows` / :func:`generate_failure_rows`: just the rows of either file.
* :func:`rollout_event`: one attempt on demand (a fake agent server's reply).
* :func:`write_run_dir`: the run directory, streamed with orjson in constant memory.
* :func:`api_steps`: the same dispatches as ``/v1`` ingest events beside the lines NeMo Gym writes.
* :func:`sample_task_seconds`: the long-tailed task duration used for the simulated timing.

Faults are injected at configured rates, at most one per row, each built to make one health
check report a finding (:data:`FAULT_CHECKS`). A failed model call carries no token counts, as
a real 429/500 does, so ``model_call_missing_token_counts`` fires beside ``model_call_failed``;
a rollout cut short by a failed call also has a hollow last turn when nothing preceded it.

Example::

    config = SyntheticConfig(num_tasks=5000, repeats_per_task=4, faults=FaultRates.mixed(0.005))
    write_run_dir("runs/bench", config, seed=7)  # 20,000 rollouts, ~1.5 GB
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from ._synthetic._api import ApiStep, api_steps
from ._synthetic._config import FAULT_CHECKS, FaultRates, SyntheticConfig
from ._synthetic._durations import sample_task_seconds
from ._synthetic._schedule import EventKind, RolloutEvent, generate_events, rollout_event
from ._synthetic._writer import RunDirStats, materialized_rows, write_run_dir

__all__ = [
    "FAULT_CHECKS",
    "SAMPLE_RUN_CONFIG",
    "SAMPLE_RUN_SEED",
    "ApiStep",
    "EventKind",
    "FaultRates",
    "RolloutEvent",
    "RunDirStats",
    "SyntheticConfig",
    "api_steps",
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
