"""Configuration of the synthetic rollout generator: sizes, shapes and fault rates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Final

__all__ = ["FAULT_CHECKS", "FaultRates", "SyntheticConfig"]


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Probability, per result row, of each injected fault (at most one fault per row).

    Faults are exclusive so that each one produces its intended finding; the rates must
    therefore sum to at most 1.
    """

    hollow_turn: float = 0.0
    """A turn whose answer and reasoning are empty (``agent_turn_hollow``)."""
    missing_turns: float = 0.0
    """A harness that records calls but no turns, without saying so (``rollout_missing_agent_turns``)."""
    failed_model_call: float = 0.0
    """A 429/500 model call retried successfully inside the rollout (``model_call_failed``)."""
    ended_on_failed_call: float = 0.0
    """The policy model's last call failed (``rollout_ended_on_failed_model_call``)."""
    missing_token_counts: float = 0.0
    """A successful call without prompt or completion tokens (``model_call_missing_token_counts``)."""
    zero_completion_tokens: float = 0.0
    """A call that reports 0 completion tokens (``model_call_zero_completion_tokens``)."""
    token_count_mismatch: float = 0.0
    """Top-level usage disagrees with the captured calls (``rollout_token_count_mismatch``)."""
    runaway_generation: float = 0.0
    """``finish_reason`` length with a saved, empty response (``model_call_runaway_generation``)."""
    malformed_response: float = 0.0
    """A length-limited chat response whose ``message`` is a bare string: the runaway check
    raises (``check_execution_error``)."""
    capture_mismatch: float = 0.0
    """A reference without its captured call, a duplicated capture, or a contradiction gap."""
    observation_gap: float = 0.0
    """A gap code that leaves some checks unobserved (verdict ``unobserved``)."""
    no_trajectory: float = 0.0
    """A legacy row without ``ng_trajectory`` (verdict ``unobserved``)."""
    invalid_trajectory: float = 0.0
    """An ``ng_trajectory`` that fails validation (``record_unreadable``)."""
    unreadable_line: float = 0.0
    """A torn, truncated JSONL line (``record_unreadable``)."""
    duplicate_identity: float = 0.0
    """The same ``(task, rollout)`` written twice (``rollout_duplicate_identity``)."""

    def __post_init__(self) -> None:
        total = 0.0
        for field in fields(self):
            value = getattr(self, field.name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"FaultRates.{field.name} must be in [0, 1], got {value!r}")
            total += value
        if total > 1.0 + 1e-9:
            raise ValueError(f"FaultRates must sum to at most 1 (faults are exclusive), got {total!r}")

    def items(self) -> tuple[tuple[str, float], ...]:
        """``(fault name, rate)`` pairs in declaration order."""
        return tuple((field.name, float(getattr(self, field.name))) for field in fields(self))

    @classmethod
    def mixed(cls, rate: float = 0.02) -> FaultRates:
        """Every fault at the same ``rate``: a realistic corpus where most rows are healthy."""
        return cls(**{field.name: rate for field in fields(cls)})


FAULT_CHECKS: Final[Mapping[str, str | None]] = MappingProxyType(
    {
        "hollow_turn": "agent_turn_hollow",
        "missing_turns": "rollout_missing_agent_turns",
        "failed_model_call": "model_call_failed",
        "ended_on_failed_call": "rollout_ended_on_failed_model_call",
        "missing_token_counts": "model_call_missing_token_counts",
        "zero_completion_tokens": "model_call_zero_completion_tokens",
        "token_count_mismatch": "rollout_token_count_mismatch",
        "runaway_generation": "model_call_runaway_generation",
        "malformed_response": "check_execution_error",
        "capture_mismatch": "trajectory_capture_mismatch",
        "observation_gap": None,
        "no_trajectory": None,
        "invalid_trajectory": "record_unreadable",
        "unreadable_line": "record_unreadable",
        "duplicate_identity": "rollout_duplicate_identity",
        "broken_task": "rollout_ended_on_failed_model_call",
    }
)
"""The check each fault is built to trigger (``None``: the row becomes ``unobserved``).

``broken_task`` is set per task (``SyntheticConfig.broken_task_fraction``), not per row: every
repeat of such a task also makes ``task_consistently_unhealthy`` and
``task_no_successful_model_calls`` fire."""


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """Shape of a synthetic run. Defaults give healthy rows of ~8 calls x 8 KB."""

    num_tasks: int = 100
    repeats_per_task: int = 4
    model_calls_per_rollout: int = 8
    """Mean number of policy-model calls per rollout (each rollout draws around it)."""
    payload_bytes_per_call: int = 8192
    """Payload budget of one model call: its request and response bodies (about two thirds of it
    go there) plus their echo in the conversation, turns and capture. With the fixed parts of a row,
    8 calls x 8 KB make rows of ~80 KB, the size of the reference's benchmark corpus (19,879
    rollouts, 1.57 GB)."""
    turns: int = 1
    """User turns (question/answer exchanges) in the main agent's conversation."""
    subagent_probability: float = 0.2
    tool_call_probability: float = 0.6
    """Probability that a non-final agent step calls a tool rather than thinking aloud."""
    chat_dialect_probability: float = 0.25
    """Share of rollouts whose model speaks chat completions instead of the Responses API."""
    faults: FaultRates = FaultRates()
    broken_task_fraction: float = 0.0
    """Share of tasks whose prompt the model rejects (HTTP 400) in every repeat (task-level checks)."""
    failure_rate: float = 0.0
    """Probability that one dispatch attempt ends in a failure row instead of a result."""
    terminal_failure_fraction: float = 0.3
    """Share of failure rows stamped ``_ng_failure_terminal: true`` (never retried)."""
    max_attempts: int = 3
    drained_fraction: float = 0.0
    """Share of rollouts, at the end of the run, that the dispatch budget never starts."""
    judge_call_probability: float = 0.0
    """Share of rollouts ending with a judge call on another model that no invocation references."""
    model_call_capture: bool = True
    """Attach ``ng_model_call_capture`` (per-call metadata), as runs with capture enabled do."""
    concurrency: int = 64
    start_time: float = 1_790_000_000.0
    """Wall-clock epoch seconds at which the simulated run starts."""
    agent_name: str = "synthetic_agent"
    policy_model: str = "policy_model"

    def __post_init__(self) -> None:
        for name in ("num_tasks", "repeats_per_task"):
            if getattr(self, name) < 0:
                raise ValueError(f"SyntheticConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("model_calls_per_rollout", "turns", "max_attempts", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"SyntheticConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.payload_bytes_per_call < 0:
            raise ValueError(
                f"SyntheticConfig.payload_bytes_per_call must be >= 0, got {self.payload_bytes_per_call!r}"
            )
        for name in (
            "subagent_probability",
            "tool_call_probability",
            "chat_dialect_probability",
            "failure_rate",
            "terminal_failure_fraction",
            "drained_fraction",
            "broken_task_fraction",
            "judge_call_probability",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SyntheticConfig.{name} must be in [0, 1], got {value!r}")

    @property
    def text_scale(self) -> float:
        """How much prompts and tool outputs shrink below the default 8 KB payload (at most 1)."""
        return min(1.0, self.payload_bytes_per_call / 8192)

    @property
    def num_rollouts(self) -> int:
        """Number of ``(task, rollout)`` pairs the run dispatches."""
        return self.num_tasks * self.repeats_per_task
