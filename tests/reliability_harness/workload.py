"""A generated run as API events, the files a collector would have written, and the batch check.

The oracle every scenario compares against is ``health.health_check_run_dir`` over the same
rows: the sidecar's ``quality_summary.json`` and ``rollout_verdicts.jsonl`` must equal its
files byte for byte.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from health import health_check_run_dir
from sidecar.events import EventBatch, idempotency_key
from sidecar.journal import Journal
from sidecar.synthetic import FaultRates, SyntheticConfig, api_steps, generate_events

__all__ = ["GeneratedRun", "batch_files", "generate_run", "journal_keys", "report_files"]


@dataclass
class GeneratedRun:
    """API events in completion order (``run_started`` first, ``run_ended`` last)."""

    run_id: str
    run_dir: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    main_lines: list[bytes] = field(default_factory=list)
    failure_lines: list[bytes] = field(default_factory=list)
    completions: int = 0

    @property
    def body(self) -> list[dict[str, Any]]:
        """The rollout events between ``run_started`` and ``run_ended``."""
        return self.events[1:-1]

    def idempotency_keys(self, events: list[dict[str, Any]] | None = None) -> list[str]:
        """The idempotency key the service derives for each event (its journal identity)."""
        chosen = self.events if events is None else events
        return [idempotency_key(self.run_id, event) for event in EventBatch.validate_python(chosen)]

    def write_files(self) -> Path:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / "rollouts.jsonl"
        path.write_bytes(b"".join(self.main_lines))
        (self.run_dir / "rollouts_failures.jsonl").write_bytes(b"".join(self.failure_lines))
        return path


def generate_run(
    run_id: str,
    run_dir: Path,
    *,
    num_tasks: int,
    repeats: int = 2,
    seed: int = 7,
    payload_bytes_per_call: int = 256,
    fault_rate: float = 0.02,
    failure_rate: float = 0.1,
    drained_fraction: float = 0.03,
    text_hook: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> GeneratedRun:
    """A realistic run (faults, failures, drains, torn lines) from ``sidecar.synthetic``."""
    config = SyntheticConfig(
        num_tasks=num_tasks,
        repeats_per_task=repeats,
        model_calls_per_rollout=2,
        payload_bytes_per_call=payload_bytes_per_call,
        faults=FaultRates.mixed(fault_rate),
        failure_rate=failure_rate,
        drained_fraction=drained_fraction,
    )
    run = GeneratedRun(run_id, run_dir)
    plan = {str(task): repeats for task in range(num_tasks)}
    run.events.append({"kind": "run_started", "plan": plan, "source_path": str(run_dir / "rollouts.jsonl")})
    for step in api_steps(generate_events(config, seed), row_hook=text_hook):
        run.events.append(step.event)
        if step.main_line is not None:
            run.main_lines.append(step.main_line)
            run.completions += 1
        if step.failure_line is not None:
            run.failure_lines.append(step.failure_line)
    run.events.append({"kind": "run_ended"})
    return run


def batch_files(run_dir: Path) -> tuple[bytes, bytes]:
    """``quality_summary.json`` and ``rollout_verdicts.jsonl`` of the batch health check."""
    with contextlib.redirect_stdout(io.StringIO()):
        result = health_check_run_dir(run_dir, workers=1)
    return result.summary_path.read_bytes(), result.verdicts_path.read_bytes()


def report_files(client: httpx.Client, run_id: str) -> tuple[bytes, bytes]:
    """The sidecar's counterparts of :func:`batch_files`."""
    params = {"run_id": run_id}
    summary = client.get("/report/quality_summary.json", params=params)
    verdicts = client.get("/report/verdicts", params=params)
    summary.raise_for_status()
    verdicts.raise_for_status()
    return summary.content, verdicts.content


def journal_keys(path: Path) -> list[str]:
    """Every idempotency key committed to the journal at ``path``, in commit order (read-only)."""
    keys = Journal(path).stored_keys()  # compacted records included
    try:
        return [key for _, key in keys]
    finally:
        keys.close()
