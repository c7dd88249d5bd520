"""The check registry: every health check NeMo Gym 0.7.0 knows, in registry order (load-bearing:
findings, ``unobserved``, coverage and issue counts follow it). Its pydantic :class:`CheckSpec`
models are built on first access, so the batch path never imports pydantic.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

from .check_terms import CheckInput, CheckScope, CheckSubject

if TYPE_CHECKING:
    from .types import CheckSpec

    CHECK_REGISTRY: tuple[CheckSpec, ...]

__all__ = [
    "CHECK_IDS",
    "CHECK_REGISTRY",
    "ROLLOUT_CHECK_IDS",
    "TASK_CHECK_IDS",
    "check_reads",
    "check_spec",
]

_R = CheckInput.RECORD
_T = CheckInput.TRAJECTORY


class _Entry(NamedTuple):
    """A check's spec as plain values (the fields of ``CheckSpec``)."""

    id: str
    evaluation_scope: CheckScope
    subject: CheckSubject
    reads: frozenset[CheckInput]


def _spec(check_id: str, scope: CheckScope, subject: CheckSubject, *reads: CheckInput) -> _Entry:
    return _Entry(check_id, scope, subject, frozenset(reads))


_ROLLOUT = CheckScope.ROLLOUT
_TASK = CheckScope.TASK

_TABLE: tuple[_Entry, ...] = (
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

CHECK_IDS: tuple[str, ...] = tuple(entry.id for entry in _TABLE)
ROLLOUT_CHECK_IDS: tuple[str, ...] = tuple(e.id for e in _TABLE if e.evaluation_scope is _ROLLOUT)
TASK_CHECK_IDS: tuple[str, ...] = tuple(e.id for e in _TABLE if e.evaluation_scope is _TASK)

_BY_ID = {entry.id: entry for entry in _TABLE}


@functools.cache
def _registry() -> tuple[CheckSpec, ...]:
    from .types import CheckSpec

    return tuple(CheckSpec(**entry._asdict()) for entry in _TABLE)


def _entry(check_id: str) -> _Entry:
    try:
        return _BY_ID[check_id]
    except KeyError:
        raise KeyError(f"unknown health check {check_id!r}") from None


def check_reads(check_id: str) -> frozenset[CheckInput]:
    """What ``check_id`` reads (its spec's ``reads``); ``KeyError`` names the unknown ID."""
    return _entry(check_id).reads


def check_spec(check_id: str) -> CheckSpec:
    """The spec of ``check_id``; ``KeyError`` names the unknown ID."""
    return _registry()[CHECK_IDS.index(_entry(check_id).id)]


def __getattr__(name: str) -> object:
    if name == "CHECK_REGISTRY":
        return _registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
