"""Write a synthetic run directory the way the collector lays it out (``<stem>.jsonl``, its
``_failures`` and ``_materialized_inputs`` files)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ._assemble import create_params
from ._config import SyntheticConfig
from ._rollout import task_question
from ._schedule import generate_events

__all__ = ["RunDirStats", "materialized_rows", "write_run_dir"]

_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class RunDirStats:
    """What ``write_run_dir`` wrote."""

    rollouts_path: Path
    failures_path: Path
    rows: int
    unreadable_lines: int
    failure_rows: int
    drained: int
    bytes_written: int


def materialized_rows(config: SyntheticConfig, seed: int) -> Iterator[dict[str, Any]]:
    """The dispatcher's input rows, one per ``(task, rollout)``, in materialized order."""
    for task_index in range(config.num_tasks):
        question = task_question(seed, task_index, config.text_scale)
        for rollout_index in range(config.repeats_per_task):
            yield {
                "responses_create_params": create_params(question),
                "task_name": f"synthetic_task_{task_index % 17}",
                "_ng_task_index": task_index,
                "_ng_rollout_index": rollout_index,
                "agent_ref": {"name": config.agent_name},
            }


def write_run_dir(
    path: str | Path,
    config: SyntheticConfig,
    seed: int,
    *,
    name: str = "rollouts",
    materialized_inputs: bool = True,
) -> RunDirStats:
    """Stream a run into ``path``: ``<name>.jsonl``, ``<name>_failures.jsonl`` and the inputs.

    Rows are serialized one at a time, so memory stays flat however large the run. Existing
    files are replaced (a fresh, non-resume run).
    """
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    rollouts_path = directory / f"{name}.jsonl"
    failures_path = directory / f"{name}_failures.jsonl"
    rows = unreadable = failures = drained = written = 0
    with (
        open(rollouts_path, "wb", buffering=_BUFFER) as main,
        open(failures_path, "wb", buffering=_BUFFER) as side,
    ):
        for event in generate_events(config, seed):
            if event.kind == "drained":
                drained += 1
                continue
            line = event.to_line()
            written += len(line)
            if event.kind == "failure":
                failures += 1
                side.write(line)
            else:
                unreadable += event.kind == "unreadable"
                rows += event.kind == "result"
                main.write(line)
    if materialized_inputs:
        with open(directory / f"{name}_materialized_inputs.jsonl", "wb", buffering=_BUFFER) as inputs:
            for row in materialized_rows(config, seed):
                inputs.write(orjson.dumps(row) + b"\n")
    return RunDirStats(rollouts_path, failures_path, rows, unreadable, failures, drained, written)
