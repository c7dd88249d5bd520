"""Pydantic v2 models of the ``ng_trajectory`` contract (``TrajectoryRecord`` and its parts).

NeMo Gym 0.7.0's validation semantics; the checks read each field's canonical (dumped) value,
so field types and defaults are load-bearing: do not "improve" them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .conversation import Conversation

__all__ = [
    "AgentInvocation",
    "ModelCallRef",
    "ModelServerRef",
    "ObservationGap",
    "TrajectoryModelCall",
    "TrajectoryRecord",
    "TrajectoryResponseMetadata",
    "TrajectoryTokenStats",
    "TrajectoryToolCall",
    "TrajectoryTurn",
]

_FORBID = ConfigDict(extra="forbid", revalidate_instances="never")

NonNegativeFloat = Annotated[float | None, Field(ge=0)]
NonNegativeInt = Annotated[int | None, Field(ge=0)]


class ModelServerRef(BaseModel):
    """Which model server answered a call; extra keys are dropped, not rejected."""

    model_config = ConfigDict(extra="ignore", revalidate_instances="never")

    type: Literal["responses_api_models"]
    name: str


class ModelCallRef(BaseModel):
    """A join key from a turn or invocation to a captured model call."""

    model_config = _FORBID

    model_call_id: str | None = None
    model_ref: ModelServerRef | None = None
    response_id: str | None = None

    @model_validator(mode="after")
    def _require_join_key(self) -> ModelCallRef:
        if self.model_call_id or (self.model_ref is not None and self.response_id):
            return self
        raise ValueError(
            "model call reference needs a non-empty model_call_id or model_ref plus a non-empty "
            f"response_id (got model_call_id={self.model_call_id!r}, response_id={self.response_id!r})"
        )


class TrajectoryTurn(BaseModel):
    model_config = _FORBID

    invocation_id: str
    task_id: str
    rollout_id: str
    turn_no: Annotated[int, Field(ge=1)]
    timestamp: float
    question: Any = None
    answer: Any = None
    reasoning_content: Any = None
    resolved: bool | None = None
    step_count: Annotated[int, Field(ge=0)]
    model_calls: list[ModelCallRef] = Field(default_factory=list)


class AgentInvocation(BaseModel):
    model_config = _FORBID

    kind: Literal["agent_invocation"] = "agent_invocation"
    invocation_id: str
    parent_invocation_id: str | None = None
    spawned_by_tool_call_id: str | None = None
    status: Literal["completed", "failed", "incomplete", "unknown"] = "unknown"
    duration_ms: NonNegativeFloat = None
    error_type: str | None = None
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    conversation: Conversation = Field(default_factory=list)


class TrajectoryResponseMetadata(BaseModel):
    model_config = _FORBID

    response_id: str | None = None
    model_ref: ModelServerRef | None = None
    model: str | None = None
    dialect: str | None = None
    status_code: int | None = None
    response_status: str | None = None
    finish_reason: str | None = None
    upstream_attempted: bool | None = None
    response_source: Literal["upstream", "local"] | None = None
    upstream_status_code: int | None = None
    local_response_reason: str | None = None
    error_category: str | None = None
    latency_ttft_ms: NonNegativeFloat = None


class TrajectoryTokenStats(BaseModel):
    model_config = _FORBID

    prompt_tokens: NonNegativeInt = None
    completion_tokens: NonNegativeInt = None
    reasoning_tokens: NonNegativeInt = None
    total_tokens: NonNegativeInt = None
    cached_tokens: NonNegativeInt = None


class TrajectoryModelCall(BaseModel):
    model_config = _FORBID

    model_call_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: NonNegativeFloat = None
    request: Any = None
    response: Any = None
    response_metadata: TrajectoryResponseMetadata = Field(default_factory=TrajectoryResponseMetadata)
    token_stats: TrajectoryTokenStats = Field(default_factory=TrajectoryTokenStats)


class TrajectoryToolCall(BaseModel):
    model_config = _FORBID

    kind: Literal["tool_call"] = "tool_call"
    invocation_id: str
    tool_call_id: str
    sandbox_id: str | None = None
    tool_name: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: NonNegativeFloat = None
    timing_source: Literal["executor", "artifact", "harness"] | None = None
    status: Literal["completed", "failed", "timeout", "cancelled", "incomplete", "unknown"] = "unknown"
    error_type: str | None = None
    output: Any = None

    @model_validator(mode="after")
    def _require_ordered_times(self) -> TrajectoryToolCall:
        started, completed = self.started_at, self.completed_at
        if started is not None and completed is not None and completed < started:
            raise ValueError(
                f"tool call {self.tool_call_id!r} completed_at {completed!r} is earlier "
                f"than started_at {started!r}"
            )
        return self


class ObservationGap(BaseModel):
    """A producer-declared hole in the capture; the health checks read its ``code``."""

    model_config = _FORBID

    code: str
    invocation_id: str | None = None
    detail: str | None = None


class TrajectoryRecord(BaseModel):
    """The ``ng_trajectory`` value of one rollout record."""

    model_config = _FORBID

    schema_version: Literal["1.0"] = "1.0"
    task_id: str
    rollout_id: str
    invocations: list[AgentInvocation] = Field(default_factory=list)
    turns: list[TrajectoryTurn] = Field(default_factory=list)
    model_calls: list[TrajectoryModelCall] = Field(default_factory=list)
    tool_calls: list[TrajectoryToolCall] = Field(default_factory=list)
    gaps: list[ObservationGap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_cross_field_rules(self) -> TrajectoryRecord:
        invocation_ids: set[str] = set()
        for invocation in self.invocations:
            if invocation.invocation_id in invocation_ids:
                raise ValueError(f"duplicate invocation_id {invocation.invocation_id!r}")
            invocation_ids.add(invocation.invocation_id)
        call_ids: set[str] = set()
        for call in self.model_calls:
            call_id = call.model_call_id
            if call_id:
                if call_id in call_ids:
                    raise ValueError(f"duplicate model_call_id {call_id!r}")
                call_ids.add(call_id)
        turn_keys: set[tuple[str, int]] = set()
        for turn in self.turns:
            if turn.task_id != self.task_id or turn.rollout_id != self.rollout_id:
                raise ValueError(
                    f"turn {turn.turn_no} belongs to task {turn.task_id!r} / rollout {turn.rollout_id!r}, "
                    f"not {self.task_id!r} / {self.rollout_id!r}"
                )
            key = (turn.invocation_id, turn.turn_no)
            if key in turn_keys:
                raise ValueError(f"duplicate turn {turn.turn_no} in invocation {turn.invocation_id!r}")
            turn_keys.add(key)
        return self
