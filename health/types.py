"""Shared value types of the health pipeline (check contracts, findings, rollout digests), with
NeMo Gym 0.7.0's ``nemo_gym.health.types`` field names and defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .check_terms import CheckInput, CheckScope, CheckSubject, TaskIndex, Verdict

__all__ = [
    "CheckInput",
    "CheckScope",
    "CheckSpec",
    "CheckSubject",
    "Finding",
    "HealthCheckResult",
    "RolloutDigest",
    "TaskIndex",
    "Verdict",
]


class CheckSpec(BaseModel):
    """Stable, self-describing contract of one check: what it judges and what it reads."""

    model_config = ConfigDict(frozen=True)

    id: str
    evaluation_scope: CheckScope
    subject: CheckSubject
    reads: frozenset[CheckInput]

    @field_validator("reads")
    @classmethod
    def _require_one_call_binding_view(cls, reads: frozenset[CheckInput]) -> frozenset[CheckInput]:
        if {CheckInput.BOUND_CALLS, CheckInput.OWNED_MODEL_CALLS} <= reads:
            raise ValueError("a check reads at most one of bound_calls / owned_model_calls")
        return reads


class Finding(BaseModel):
    """Evidence emitted by a check. Checks never emit verdicts."""

    check: str
    subject: dict[str, int | str]
    locator: dict[str, int | str] | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class RolloutDigest(BaseModel):
    """Everything the run-level stages need to know about one physical rollout line; ``ordinal``
    (not NeMo Gym's) restores input order for a reducer fed out of order."""

    task_index: TaskIndex
    rollout_index: TaskIndex
    stage_index: TaskIndex | None = None
    rollout_id: str
    verdict: Verdict
    findings: list[Finding]
    unobserved: list[str]
    capture_observed: bool
    policy_calls_observed: bool = False
    model_calls: int = 0
    successful_model_calls: int = 0
    model_call_errors: int = 0
    errors_by_status: dict[str, int] = Field(default_factory=dict)
    ended_on_error: bool = False
    duplicated_calls: int = 0
    transcript_prompt_tokens: int = 0
    transcript_completion_tokens: int = 0
    capture_prompt_tokens: int = 0
    capture_completion_tokens: int = 0
    ordinal: int = 0


class HealthCheckResult(BaseModel):
    summary: dict[str, Any]
    rollouts: list[RolloutDigest]
    summary_path: Path
    verdicts_path: Path
