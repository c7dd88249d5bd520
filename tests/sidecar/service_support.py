"""Shared helpers of the service tests: a generated run turned into API events and batch files."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sidecar.rollout_perf import DispatchLatencyTracker
from sidecar.synthetic import FaultRates, SyntheticConfig, generate_events

__all__ = ["GeneratedRun", "generate_run", "post_events"]


@dataclass
class GeneratedRun:
    """API events (in dispatch-completion order) and what the collector's files would hold."""

    plan: dict[str, int]
    events: list[dict[str, Any]] = field(default_factory=list)
    main_lines: list[bytes] = field(default_factory=list)
    tracker_ops: list[tuple[str, float | None]] = field(default_factory=list)

    def local_tracker(self) -> DispatchLatencyTracker:
        tracker = DispatchLatencyTracker()
        for op, seconds in self.tracker_ops:
            if op == "record":
                assert seconds is not None
                tracker.record(seconds)
            elif op == "record_failure":
                assert seconds is not None
                tracker.record_failure(seconds)
            else:
                tracker.record_drained()
        return tracker

    def write_rollouts(self, run_dir: Path) -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "rollouts.jsonl"
        path.write_bytes(b"".join(self.main_lines))
        return path


def generate_run(
    *,
    num_tasks: int = 12,
    repeats: int = 3,
    seed: int = 7,
    fault_rate: float = 0.05,
    failure_rate: float = 0.1,
    drained_fraction: float = 0.05,
    payload_bytes_per_call: int = 512,
    text_hook: Any = None,
    duplicates: bool = True,
) -> GeneratedRun:
    config = SyntheticConfig(
        num_tasks=num_tasks,
        repeats_per_task=repeats,
        model_calls_per_rollout=3,
        payload_bytes_per_call=payload_bytes_per_call,
        faults=dataclasses.replace(
            FaultRates.mixed(fault_rate), **({} if duplicates else {"duplicate_identity": 0.0})
        ),
        failure_rate=failure_rate,
        drained_fraction=drained_fraction,
    )
    run = GeneratedRun(plan={str(task): repeats for task in range(num_tasks)})
    for event in generate_events(config, seed):
        seconds = event.latency_seconds
        if event.kind == "result":
            row = event.row if text_hook is None else text_hook(event.row)
            run.events.append({"kind": "completed", "seconds": seconds, "row": row})
            import orjson

            run.main_lines.append(orjson.dumps(row) + b"\n")
            run.tracker_ops.append(("record", seconds))
        elif event.kind == "unreadable":
            assert event.line is not None
            try:
                text = event.line.decode("utf-8")
            except UnicodeDecodeError:
                continue  # a torn multi-byte character cannot travel in a JSON string
            if not text.strip():
                continue
            run.main_lines.append(event.line if event.line.endswith(b"\n") else event.line + b"\n")
            run.events.append(
                {
                    "kind": "completed",
                    "seconds": seconds or 0.0,
                    "line": text,
                    "line_number": len(run.main_lines),
                }
            )
            run.tracker_ops.append(("record", seconds or 0.0))
        elif event.kind == "failure":
            run.events.append({"kind": "failed", "seconds": seconds, "row": event.row})
            if seconds is not None:
                run.tracker_ops.append(("record_failure", seconds))
        else:
            run.events.append(
                {"kind": "drained", "task_index": event.task_index, "rollout_index": event.rollout_index}
            )
            run.tracker_ops.append(("record_drained", None))
    return run


def post_events(
    client: httpx.Client, run_id: str, events: list[dict[str, Any]], *, batch: int = 16
) -> list[dict[str, Any]]:
    """Post ``events`` in order, ``batch`` per request; returns every per-event result."""
    results: list[dict[str, Any]] = []
    for start in range(0, len(events), batch):
        response = client.post(f"/v1/runs/{run_id}/events", json=events[start : start + batch])
        assert response.status_code == 200, response.text
        results.extend(response.json()["results"])
    return results
