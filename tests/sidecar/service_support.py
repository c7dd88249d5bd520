"""Shared helpers of the service tests: a generated run turned into API events and batch files."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sidecar.ingest.engines import Engines, default_engines
from sidecar.ingest.events import Event, Heartbeat
from sidecar.ingest.facts import derive_fact
from sidecar.ingest.ingestor import Ingestor
from sidecar.journal import Journal
from sidecar.perf import DispatchLatencyTracker
from sidecar.state.run import RunState
from tests.sidecar.synthetic_support import (
    START_TIME,
    FaultRates,
    SyntheticConfig,
    api_steps,
    generate_events,
)

__all__ = [
    "GeneratedRun",
    "IngestHarness",
    "apply_event",
    "generate_run",
    "post_events",
    "state_fingerprint",
    "two_agents",
]


@dataclass
class GeneratedRun:
    """API events (in dispatch-completion order) and what the collector's files would hold."""

    plan: dict[str, int]
    events: list[dict[str, Any]] = field(default_factory=list)
    main_lines: list[bytes] = field(default_factory=list)
    tracker_ops: list[tuple[str, float | None]] = field(default_factory=list)
    started_at: float = START_TIME
    """When the simulated run started (its events' ``at`` and its rows' trajectories follow it)."""

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
    run = GeneratedRun(plan={str(task): repeats for task in range(num_tasks)}, started_at=START_TIME)
    for step in api_steps(generate_events(config, seed), row_hook=text_hook):
        run.events.append(step.event)
        if step.main_line is not None:
            run.main_lines.append(step.main_line)
        if step.tracker_op is not None:
            run.tracker_ops.append(step.tracker_op)
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


def state_fingerprint(run: Any) -> dict[str, Any]:
    """Everything observable about a ``RunState``, to compare two ways of rebuilding it."""
    report = run.report()
    report["latency"].pop("completions_per_hour")  # reads the wall clock now
    return {
        "summary": run.reducer.summary_bytes(),
        "verdicts": b"".join(run.reducer.iter_verdict_lines()),
        "report": report,
        "margin": run.drain_margin(None, now=0.0),
        "tokens": dict(run.tokens),
        "failed": dict(run.failed),
        "durations": {
            kind: (h.counts, h.total, h.observations, h.low, h.high) for kind, h in run.durations.items()
        },
        "health": run.health_view(fresh=True),
        "inflight": run.inflight_body(2_000_000.0, limit=1000),
        "timeline": run.timeline_body(),
        "agents": run.agent_rows(),
        "agents_folded": run.agents.folded,
    }


def two_agents(row: dict[str, Any]) -> dict[str, Any]:
    """A row hook (``generate_run(text_hook=...)``): rows of even tasks name ``agent-even``, the
    others ``agent-odd`` (a task index that is not an int: ``agent-odd``)."""
    task = row.get("_ng_task_index")
    even = type(task) is int and task % 2 == 0
    return {**row, "agent_ref": {"name": "agent-even" if even else "agent-odd"}}


class IngestHarness:
    """A journal and an ingestor over it, restartable on the same file (no HTTP, no summaries)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.journal: Journal | None = None
        self.ingestor: Ingestor | None = None

    async def start(self, *, engines: Engines | None = None, **options: Any) -> Ingestor:
        """Open the journal, replay it and start ingesting; ``options`` go to :class:`Ingestor`."""
        self.journal = Journal(self.path)
        await self.journal.open()
        self.ingestor = Ingestor(self.journal, engines or default_engines(), health_interval_s=0.0, **options)
        self.ingestor.replay()
        self.ingestor.start()
        return self.ingestor

    async def stop(self) -> None:
        if self.ingestor is not None:
            await self.ingestor.stop()
        if self.journal is not None:
            await self.journal.close()
        self.ingestor = self.journal = None


def apply_event(state: RunState, event: Event, received_at: float) -> dict[str, Any] | None:
    """Derive ``event``'s fact and apply it to ``state`` directly, as the ingestor would (no journal)."""
    if isinstance(event, Heartbeat):
        state.heartbeat(event, received_at)
        return None
    settings = (state.config.source_path, state.ignored_checks)
    fact = derive_fact(event, received_at=received_at, engines=default_engines(), settings=settings)
    return state.apply_fact(fact)
