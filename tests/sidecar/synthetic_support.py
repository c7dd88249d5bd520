"""Whole synthetic runs for the tests and the benchmarks, built from the demo's one-row generator.

:func:`generate_events` gives every finished dispatch of a run in completion order,
:func:`write_run_dir` the run directory NeMo Gym's collector writes, :func:`api_steps` the ``/v1``
events beside NeMo Gym's lines. The names of :mod:`tests.sidecar.synthetic` are re-exported.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import orjson

from sidecar.perf import drained_result
from tests.sidecar.synthetic import (
    START_TIME,
    FaultRates,
    Job,
    RolloutEvent,
    SyntheticConfig,
    finish_job,
    materialized_rows,
    rollout_event,
    sample_task_seconds,
    stamp,
    start_job,
)

__all__ = [
    "FAULT_CHECKS",
    "MAX_ATTEMPTS",
    "SAMPLE_RUN_CONFIG",
    "SAMPLE_RUN_SEED",
    "START_TIME",
    "ApiStep",
    "FaultRates",
    "RolloutEvent",
    "RunDirStats",
    "SyntheticConfig",
    "api_steps",
    "generate_events",
    "generate_rows",
    "materialized_rows",
    "rollout_event",
    "sample_task_seconds",
    "write_run_dir",
]

JSON = dict[str, Any]
MAX_ATTEMPTS: Final = 3
"""Dispatch attempts per rollout: a failed attempt is retried unless terminal or the last."""
DRAIN_MARGIN_S: Final = 157.0


FAULT_CHECKS: Final[Mapping[str, str | None]] = MappingProxyType(
    {f.name: f.metadata["check"] for f in fields(FaultRates)}
    | {"broken_task": "rollout_ended_on_failed_model_call"}
)
"""The check each fault makes fire. ``broken_task`` is per task (``broken_task_fraction``): every repeat
of it also makes ``task_consistently_unhealthy`` and ``task_no_successful_model_calls`` fire."""


SAMPLE_RUN_CONFIG: Final = SyntheticConfig(
    num_tasks=10,
    repeats_per_task=4,
    model_calls_per_rollout=1,
    payload_bytes_per_call=64,
    faults=FaultRates.mixed(0.04),
    broken_task_fraction=0.1,
    failure_rate=0.1,
    concurrency=8,
)
"""Configuration of the bundled ``sidecar/demo/sample_run`` (small rows, every verdict represented)."""
SAMPLE_RUN_SEED: Final = 1217
"""Seed of the bundled sample run (picked so that every fault kind occurs)."""


def generate_events(config: SyntheticConfig, seed: int) -> Iterator[RolloutEvent]:
    """Every finished dispatch of a simulated run, in completion order.

    ``concurrency`` rollouts run at once, so repeats of a task interleave. The last
    ``drained_fraction`` of the plan is drained; drained rows, retries of failed attempts and
    re-written duplicates are dispatched after the first pass, as a resumed run appends them.
    """
    rollouts = config.num_tasks * config.repeats_per_task
    drain_from = rollouts - round(config.drained_fraction * rollouts)
    plan = (
        (task, rollout, 0, 0)
        for task in range(config.num_tasks)
        for rollout in range(config.repeats_per_task)
    )
    later: deque[Job] = deque()
    running: list[tuple[float, int, Job, random.Random, float, bool, bool]] = []
    drain_rng, order, now = random.Random(f"drain:{seed}"), itertools.count(), START_TIME
    while True:
        while len(running) < config.concurrency:
            job = next(plan, None)
            if job is None and not later:
                break
            if job is None:
                job = later.popleft()
            elif job[0] * config.repeats_per_task + job[1] >= drain_from:
                row = drained_result(drain_rng.uniform(-20.0, DRAIN_MARGIN_S), DRAIN_MARGIN_S)
                yield RolloutEvent(
                    "drained", job[0], job[1], 0, stamp(row, job, config), None, None, None, now
                )
                later.append(job)
                continue
            finish, rng, failed, terminal = start_job(config, seed, job, now)
            heapq.heappush(running, (finish, next(order), job, rng, now, failed, terminal))
        if not running:
            return
        now, _, job, rng, started, failed, terminal = heapq.heappop(running)
        event = finish_job(config, seed, job, rng, (started, now), failed, terminal)
        yield event
        if failed and not terminal and job[2] + 1 < MAX_ATTEMPTS:
            later.append((job[0], job[1], job[2] + 1, 0))
        elif event.fault == "duplicate_identity" and job[3] == 0:
            later.append((*job[:3], 1))


def generate_rows(config: SyntheticConfig, seed: int) -> Iterator[JSON]:
    """The result rows (what ``<name>.jsonl`` holds, minus torn lines) in completion order."""
    return (event.row for event in generate_events(config, seed) if event.kind == "result" and event.row)


@dataclass(frozen=True, slots=True)
class ApiStep:
    """One ingest event and what NeMo Gym would have written for it."""

    event: JSON
    main_line: bytes | None
    """The line appended to ``rollouts.jsonl`` (results and torn lines)."""
    failure_line: bytes | None
    """The line appended to ``rollouts_failures.jsonl`` (failure rows)."""
    tracker_op: tuple[str, float | None] | None
    """The ``DispatchLatencyTracker`` call the event feeds (``record``, ``record_failure``, ...)."""


def api_steps(
    events: Iterable[RolloutEvent], *, row_hook: Callable[[JSON], JSON] | None = None
) -> Iterator[ApiStep]:
    """The ``/v1`` events of generated dispatches; ``row_hook`` may rewrite result and failure rows.

    A torn line travels as raw text with its line number in ``rollouts.jsonl`` (the follower's
    shape, with no time); one that is blank or not UTF-8 cannot travel in a JSON string and is
    skipped in every view. Every other event is stamped ``at`` its simulated finish, as
    ``dispatcher_client`` stamps it.
    """
    lines = 0
    for event in events:
        seconds = event.latency_seconds
        row = event.row if row_hook is None or event.row is None else row_hook(event.row)
        if event.kind == "result":
            lines += 1
            yield ApiStep(
                {"kind": "completed", "at": event.finished_at, "seconds": seconds, "row": row},
                orjson.dumps(row) + b"\n",
                None,
                ("record", seconds),
            )
        elif event.kind == "unreadable" and event.line is not None:
            try:
                line = event.line.decode()
            except UnicodeDecodeError:
                continue
            if line.strip():
                lines += 1
                raw = {"kind": "completed", "seconds": seconds, "line": line, "line_number": lines}
                yield ApiStep(raw, event.line, None, ("record", seconds))
        elif event.kind == "failure":
            op = None if seconds is None else ("record_failure", seconds)
            failed = {"kind": "failed", "at": event.finished_at, "seconds": seconds, "row": row}
            yield ApiStep(failed, None, orjson.dumps(row) + b"\n", op)
        elif event.kind == "drained":
            drained = {
                "kind": "drained",
                "at": event.finished_at,
                "task_index": event.task_index,
                "rollout_index": event.rollout_index,
            }
            yield ApiStep(drained, None, None, ("record_drained", None))


@dataclass(frozen=True, slots=True)
class RunDirStats:
    """What :func:`write_run_dir` wrote."""

    rollouts_path: Path
    failures_path: Path
    rows: int
    unreadable_lines: int
    failure_rows: int
    drained: int
    bytes_written: int


def write_run_dir(
    path: str | Path,
    config: SyntheticConfig,
    seed: int,
    *,
    name: str = "rollouts",
    materialized_inputs: bool = True,
) -> RunDirStats:
    """Stream a run into ``path`` (``<name>.jsonl``, ``<name>_failures.jsonl``, the inputs), replacing
    what is there, one row at a time so memory stays flat however large the run."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    rollouts, failures = directory / f"{name}.jsonl", directory / f"{name}_failures.jsonl"
    counts = dict.fromkeys(("result", "unreadable", "failure", "drained", "bytes"), 0)
    with open(rollouts, "wb", buffering=1 << 20) as main, open(failures, "wb", buffering=1 << 20) as side:
        for event in generate_events(config, seed):
            counts[event.kind] += 1
            if event.kind != "drained":
                line = event.line if event.line is not None else orjson.dumps(event.row) + b"\n"
                counts["bytes"] += len(line)
                (side if event.kind == "failure" else main).write(line)
    if materialized_inputs:
        with open(directory / f"{name}_materialized_inputs.jsonl", "wb", buffering=1 << 20) as inputs:
            inputs.writelines(orjson.dumps(row) + b"\n" for row in materialized_rows(config, seed))
    return RunDirStats(
        rollouts, failures, *(counts[k] for k in ("result", "unreadable", "failure", "drained", "bytes"))
    )
