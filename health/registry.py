"""The check registry: every health check NeMo Gym 0.7.0 knows, in registry order.

Registry order is load-bearing: findings, ``unobserved`` lists, coverage and issue counts
all follow it.
"""

from __future__ import annotations

from .types import CheckInput, CheckScope, CheckSpec, CheckSubject

__all__ = [
    "CHECK_IDS",
    "CHECK_REGISTRY",
    "ROLLOUT_CHECK_IDS",
    "TASK_CHECK_IDS",
    "check_spec",
]

_R = CheckInput.RECORD
_T = CheckInput.TRAJECTORY


def _spec(check_id: str, scope: CheckScope, subject: CheckSubject, *reads: CheckInput) -> CheckSpec:
    return CheckSpec(id=check_id, evaluation_scope=scope, subject=subject, reads=frozenset(reads))


_ROLLOUT = CheckScope.ROLLOUT
_TASK = CheckScope.TASK

CHECK_REGISTRY: tuple[CheckSpec, ...] = (
    _spec("check_execution_error", _ROLLOUT, CheckSubject.CHECK_EXECUTION, _R),
    _spec("record_unreadable", _ROLLOUT, CheckSubject.RECORD, _R),
    _spec("rollout_duplicate_identity", _ROLLOUT, CheckSubject.ROLLOUT, _R),
    _spec("rollout_missing_agent_turns", _ROLLOUT, CheckSubject.ROLLOUT, _R, _T, CheckInput.AGENT_TURNS),
    _spec(
        "rollout_ended_on_failed_model_call",
        _ROLLOUT,
        CheckSubject.ROLLOUT,
        _R,
        _T,
        CheckInput.OBSERVED_MODEL_CALLS,
    ),
    _spec("agent_turn_hollow", _ROLLOUT, CheckSubject.AGENT_TURN, _R, _T, CheckInput.AGENT_TURNS),
    _spec(
        "model_call_zero_completion_tokens",
        _ROLLOUT,
        CheckSubject.MODEL_CALL,
        _R,
        _T,
        CheckInput.OWNED_MODEL_CALLS,
    ),
    _spec(
        "model_call_missing_token_counts",
        _ROLLOUT,
        CheckSubject.MODEL_CALL,
        _R,
        _T,
        CheckInput.OWNED_MODEL_CALLS,
    ),
    _spec(
        "trajectory_capture_mismatch",
        _ROLLOUT,
        CheckSubject.TRAJECTORY_CAPTURE,
        _R,
        _T,
        CheckInput.OWNED_MODEL_CALLS,
    ),
    _spec("model_call_failed", _ROLLOUT, CheckSubject.MODEL_CALL, _R, _T, CheckInput.OWNED_MODEL_CALLS),
    _spec("rollout_token_count_mismatch", _ROLLOUT, CheckSubject.ROLLOUT, _R, _T, CheckInput.BOUND_CALLS),
    _spec(
        "model_call_runaway_generation",
        _ROLLOUT,
        CheckSubject.MODEL_CALL,
        _R,
        _T,
        CheckInput.OWNED_MODEL_CALLS,
    ),
    _spec("task_consistently_unhealthy", _TASK, CheckSubject.TASK, CheckInput.REPEAT_VERDICTS),
    _spec("task_no_successful_model_calls", _TASK, CheckSubject.TASK, CheckInput.REPEAT_DIGESTS),
)

CHECK_IDS: tuple[str, ...] = tuple(spec.id for spec in CHECK_REGISTRY)
ROLLOUT_CHECK_IDS: tuple[str, ...] = tuple(s.id for s in CHECK_REGISTRY if s.evaluation_scope is _ROLLOUT)
TASK_CHECK_IDS: tuple[str, ...] = tuple(s.id for s in CHECK_REGISTRY if s.evaluation_scope is _TASK)

_BY_ID = {spec.id: spec for spec in CHECK_REGISTRY}


def check_spec(check_id: str) -> CheckSpec:
    """The spec of ``check_id``; ``KeyError`` names the unknown ID."""
    try:
        return _BY_ID[check_id]
    except KeyError:
        raise KeyError(f"unknown health check {check_id!r}") from None
