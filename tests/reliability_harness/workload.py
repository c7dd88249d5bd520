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
import orjson

from health import health_check_run_dir
from sidecar.ingest.events import EventBatch, idempotency_key
from sidecar.journal import Journal
from sidecar.state.agents import agent_name
from sidecar.state.durations import DurationHistogram
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, api_steps, generate_events

__all__ = [
    "AGENT_KEYS",
    "GeneratedRun",
    "batch_files",
    "expected_agents",
    "generate_run",
    "journal_keys",
    "report_files",
    "two_agents",
]

#: The per-agent figures a run's events decide whatever the arrival times (not the rates).
AGENT_KEYS = ("agent", "rollouts", "failed", "latency_samples", "latency_p50_s", "latency_p95_s")


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
    """A realistic run (faults, failures, drains, torn lines) from ``tests/sidecar/synthetic.py``."""
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


def two_agents(row: dict[str, Any]) -> dict[str, Any]:
    """A ``text_hook``: rows of odd tasks name the agent ``agent-odd``, the others keep theirs."""
    task = row.get("_ng_task_index")
    if "agent_ref" in row and type(task) is int and task % 2:
        return {**row, "agent_ref": {"name": "agent-odd"}}
    return row


def expected_agents(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's per-agent figures (:data:`AGENT_KEYS`) that applying each event once gives: a
    row for the main file is a rollout (its ``seconds`` a latency sample), a failed attempt or a
    failure row a failure, of the agent its row names."""
    rollouts: dict[str, int] = {}
    failed: dict[str, int] = {}
    latency: dict[str, DurationHistogram] = {}
    for event in events:
        row = event.get("row")
        if row is None and isinstance(event.get("line"), str):
            with contextlib.suppress(orjson.JSONDecodeError):
                row = orjson.loads(event["line"])
        name = agent_name(row) if isinstance(row, dict) else None
        if name is None or event["kind"] not in ("completed", "failed"):
            continue
        assert isinstance(row, dict)
        if event["kind"] == "failed" or row.get("_ng_failure_class") is not None:
            failed[name] = failed.get(name, 0) + 1
            rollouts.setdefault(name, 0)
        elif not row.get("_ng_no_persist"):
            rollouts[name] = rollouts.get(name, 0) + 1
            histogram = latency.setdefault(name, DurationHistogram())
            if event.get("seconds") is not None:
                histogram.observe(event["seconds"])
    out = []
    for name in sorted(rollouts):
        histogram = latency.get(name, DurationHistogram())
        values = (name, rollouts[name], failed.get(name, 0), histogram.observations)
        quantiles = (histogram.quantile(0.5), histogram.quantile(0.95))
        out.append(dict(zip(AGENT_KEYS, (*values, *quantiles), strict=True)))
    return out


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
