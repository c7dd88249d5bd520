"""The check vocabulary: scopes, subjects, inputs, verdicts and the task index type.

Plain enums and aliases, kept apart from the pydantic models of :mod:`health.types` (which
re-exports them) so that the batch path, which never builds those models, never imports
pydantic.
"""

from __future__ import annotations

import enum
from typing import Literal

__all__ = ["CheckInput", "CheckScope", "CheckSubject", "TaskIndex", "Verdict"]

Verdict = Literal["healthy", "unhealthy", "unobserved"]
TaskIndex = int | str


class CheckScope(enum.Enum):
    ROLLOUT = "rollout"
    TASK = "task"
    RUN = "run"


class CheckSubject(enum.Enum):
    CHECK_EXECUTION = "check_execution"
    RECORD = "record"
    ROLLOUT = "rollout"
    AGENT_TURN = "agent_turn"
    MODEL_CALL = "model_call"
    TRAJECTORY_CAPTURE = "trajectory_capture"
    TASK = "task"


class CheckInput(enum.Enum):
    """Persisted or derived evidence a check needs; missing evidence makes it unobserved."""

    RECORD = "record"
    TRAJECTORY = "trajectory"
    AGENT_TURNS = "agent_turns"
    BOUND_CALLS = "bound_calls"
    OWNED_MODEL_CALLS = "owned_model_calls"
    OBSERVED_MODEL_CALLS = "observed_model_calls"
    REPEAT_VERDICTS = "repeat_verdicts"
    REPEAT_DIGESTS = "repeat_digests"
