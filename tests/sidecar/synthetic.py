"""Realistic synthetic NeMo Gym rollouts for the tests and the benchmarks (the sample run is some).

Rows follow the collector's contract (result rows, ``_failures`` rows, drained results never
written) and carry a valid ``ng_trajectory``: multi-turn agents with tool calls and subagents on the
Responses API, ~8 KB per model call. A row is a pure function of ``(config, seed, identity)`` and its
start time: :func:`rollout_event` makes one. Whole runs (every dispatch in completion order, the run
directory, the ``/v1`` events) are built from it in ``tests/sidecar/synthetic_support.py``.

Faults come at configured rates, at most one per row, each built to make one health check fire.
A failed model call carries no token counts, as a real 429/500 does, so
``model_call_missing_token_counts`` fires beside ``model_call_failed``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal

import orjson

from sidecar.demo.agent import TERMINAL_SHARE, failure_row, gym_failure, sample_task_seconds, timeout_row
from tests.sidecar.synthetic_rows import build_row, create_params, task_question, text

__all__ = [
    "START_TIME", "FaultRates", "Job", "RolloutEvent", "SyntheticConfig", "finish_job", "gym_failure",
    "materialized_rows", "rollout_event", "sample_task_seconds", "stamp", "start_job", "timeout_row",
]

JSON = dict[str, Any]
#: When every generated run starts (Unix seconds): its events' ``at`` and its trajectories follow it.
START_TIME: Final = 1_790_000_000.0
Job = tuple[int, int, int, int]
"""``(task, rollout, attempt, copy)``: ``copy`` 1 is the re-written duplicate of a row."""


def _fault(check: str | None) -> float:
    return field(default=0.0, metadata={"check": check})


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Probability, per result row, of each fault and the check it makes fire (``None``: the row is
    ``unobserved``). Faults are exclusive: the rates sum to at most 1."""

    hollow_turn: float = _fault("agent_turn_hollow")  # a turn with no message or tool call
    missing_turns: float = _fault("rollout_missing_agent_turns")  # calls but no turns, and no gap says so
    failed_model_call: float = _fault("model_call_failed")  # a 429/500 call, retried successfully
    ended_on_failed_call: float = _fault("rollout_ended_on_failed_model_call")  # the last call failed
    missing_token_counts: float = _fault("model_call_missing_token_counts")  # no prompt or completion tokens
    zero_completion_tokens: float = _fault("model_call_zero_completion_tokens")
    token_count_mismatch: float = _fault("rollout_token_count_mismatch")  # usage disagrees with the calls
    runaway_generation: float = _fault("model_call_runaway_generation")  # length-limited, saved, empty
    malformed_response: float = _fault("check_execution_error")  # a chat message flattened to a string
    capture_mismatch: float = _fault("trajectory_capture_mismatch")  # a call not captured, or a gap
    observation_gap: float = _fault(None)  # a gap code that leaves checks unobserved
    no_trajectory: float = _fault(None)
    invalid_trajectory: float = _fault("record_unreadable")  # fails the contract's validation
    unreadable_line: float = _fault("record_unreadable")  # a torn JSONL line
    duplicate_identity: float = _fault("rollout_duplicate_identity")  # one (task, rollout) written twice

    def __post_init__(self) -> None:
        for name, rate in self.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultRates.{name} must be in [0, 1], got {rate!r}")
        if sum(rate for _, rate in self.items()) > 1.0 + 1e-9:
            raise ValueError(f"FaultRates must sum to at most 1 (faults are exclusive), got {self!r}")

    def items(self) -> tuple[tuple[str, float], ...]:
        """``(fault, rate)`` pairs in declaration order."""
        return tuple((f.name, float(getattr(self, f.name))) for f in fields(self))

    @classmethod
    def mixed(cls, rate: float = 0.02) -> FaultRates:
        """Every fault at the same ``rate``: a realistic corpus where most rows are healthy."""
        return cls(**{f.name: rate for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """Shape of a synthetic run. The defaults give healthy rows of ~8 calls x 8 KB (~80 KB a row,
    the size of the reference's benchmark corpus)."""

    num_tasks: int = 100
    repeats_per_task: int = 4
    model_calls_per_rollout: int = 8  # the mean; each rollout draws around it
    payload_bytes_per_call: int = 8192  # request and response bodies plus their echo in the trajectory
    turns: int = 1  # user turns in the main agent's conversation
    subagent_probability: float = 0.2
    tool_call_probability: float = 0.6  # of a non-final step calling a tool rather than thinking aloud
    faults: FaultRates = FaultRates()
    broken_task_fraction: float = 0.0  # tasks whose prompt the model rejects (HTTP 400) in every repeat
    failure_rate: float = 0.0  # of a dispatch attempt ending in a failure row
    drained_fraction: float = 0.0  # rollouts at the end of the run that the dispatch budget never starts
    judge_call_probability: float = 0.0  # of a rollout ending with an unreferenced judge call
    concurrency: int = 64
    agent_name: str = "synthetic_agent"
    policy_model: str = "policy_model"

    def __post_init__(self) -> None:
        for name, value in ((f.name, getattr(self, f.name)) for f in fields(self)):
            low = 1 if name in ("model_calls_per_rollout", "turns", "concurrency") else 0
            bad_int = isinstance(value, int) and value < low
            if bad_int or (isinstance(value, float) and not 0.0 <= value <= 1.0):
                raise ValueError(f"SyntheticConfig.{name} is out of range: {value!r}")


def stamp(row: JSON, job: Job, config: SyntheticConfig) -> JSON:
    """Add the keys the collector stamps on every finished result."""
    row.update(_ng_task_index=job[0], _ng_rollout_index=job[1], agent_ref={"name": config.agent_name})
    if job[2]:
        row["_ng_attempt_index"] = job[2]
    return row


@dataclass(frozen=True, slots=True)
class RolloutEvent:
    """One finished dispatch as the collector sees it."""

    kind: Literal["result", "failure", "drained", "unreadable"]
    task_index: int
    rollout_index: int
    attempt_index: int
    row: JSON | None
    """The row (stamped keys included); ``None`` for a torn ``unreadable`` line."""
    line: bytes | None
    """For ``unreadable`` events, the exact bytes written (newline included)."""
    fault: str | None
    """The injected fault (a ``FaultRates`` field or ``broken_task``)."""
    started_at: float | None
    """Wall-clock dispatch time; ``None`` for drained rows, which never start."""
    finished_at: float

    @property
    def latency_seconds(self) -> float | None:
        """Dispatch-to-finish seconds (what the latency tracker records)."""
        return None if self.started_at is None else self.finished_at - self.started_at


def start_job(
    config: SyntheticConfig, seed: int, job: Job, now: float
) -> tuple[float, random.Random, bool, bool]:
    """Start ``job`` at ``now``: its own random stream decides its finish time and whether it fails."""
    rng = random.Random(f"row:{seed}:{job[0]}:{job[1]}:{job[2]}:{job[3]}")
    finish = now + sample_task_seconds(rng)
    failed = job[3] == 0 and rng.random() < config.failure_rate
    return finish, rng, failed, failed and rng.random() < TERMINAL_SHARE


def finish_job(
    config: SyntheticConfig, seed: int, job: Job, rng: random.Random, span: tuple[float, float], failed: bool,
    terminal: bool,
) -> RolloutEvent:
    """Finish ``job`` over ``span``: its failure row, or its result row with at most one fault."""
    task, rollout, attempt, copy = job
    if failed:
        row = stamp(failure_row(rng, span[1] - span[0], terminal, text), job, config)
        return RolloutEvent("failure", task, rollout, attempt, row, None, None, *span)
    fault: str | None = "duplicate_identity" if copy else None
    if not copy and random.Random(f"broken:{seed}:{task}").random() < config.broken_task_fraction:
        fault = "broken_task"
    elif not copy:
        roll = rng.random()
        for name, rate in config.faults.items():
            if roll < rate:
                fault = name
                break
            roll -= rate
    row = build_row(config, seed, (task, rollout, attempt), span, fault, rng)
    if fault == "unreadable_line":
        data = orjson.dumps(row)
        torn = data[: rng.randrange(len(data) // 4, 3 * len(data) // 4)] + b"\n"
        return RolloutEvent("unreadable", task, rollout, attempt, None, torn, fault, *span)
    return RolloutEvent("result", task, rollout, attempt, row, None, fault, *span)


def rollout_event(
    config: SyntheticConfig, seed: int, task_index: int, rollout_index: int, attempt_index: int = 0, *,
    started_at: float = START_TIME,
) -> RolloutEvent:
    """One dispatch attempt alone, as a whole generated run makes it when started at ``started_at``."""
    job = (task_index, rollout_index, attempt_index, 0)
    finish, rng, failed, terminal = start_job(config, seed, job, started_at)
    return finish_job(config, seed, job, rng, (started_at, finish), failed, terminal)


def materialized_rows(config: SyntheticConfig, seed: int) -> Iterator[JSON]:
    """The dispatcher's input rows, one per ``(task, rollout)``, in plan order."""
    for task_index in range(config.num_tasks):
        question = task_question(seed, task_index, min(1.0, config.payload_bytes_per_call / 8192))
        for rollout_index in range(config.repeats_per_task):
            params, agent = create_params(question), {"name": config.agent_name}
            yield {
                "responses_create_params": params, "task_name": f"synthetic_task_{task_index % 17}",
                "_ng_task_index": task_index, "_ng_rollout_index": rollout_index, "agent_ref": agent,
            }
