"""The identity of one rollout record: task, repeat, stage and rollout id.

Indices are pydantic-coerced to ``int | str``, while ``rollout_id`` formats the raw values
(``"2.0-0.0"``). An index NeMo Gym cannot coerce (where it aborts the run) is reported by
:func:`resolve_identity` as the offending key, and the line treated as unreadable.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from .check_terms import TaskIndex

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "ROLLOUT_ID_KEY",
    "ROLLOUT_INDEX_KEY",
    "STAGE_INDEX_KEY",
    "TASK_INDEX_KEY",
    "Identity",
    "InvalidIdentity",
    "identity_of",
    "resolve_identity",
    "unreadable_identity",
]

TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
ROLLOUT_ID_KEY = "_ng_rollout_id"
STAGE_INDEX_KEY = "stage_index"


class _Uncoercible(Exception):
    """An index value pydantic's ``int | str`` refuses."""


@functools.cache
def _index_adapter() -> TypeAdapter[TaskIndex]:
    """pydantic's ``int | str`` validator, built for the first index that is neither (rare)."""
    from pydantic import TypeAdapter

    return TypeAdapter[TaskIndex](TaskIndex)


class Identity(Struct, frozen=True):
    """A rollout's identity as its digest reports it (a struct: one is built per row, in C)."""

    task_index: TaskIndex
    rollout_index: TaskIndex
    stage_index: TaskIndex | None
    rollout_id: str


@dataclass(frozen=True, slots=True)
class InvalidIdentity:
    """An identity value NeMo Gym would abort the run on; ``field`` names the record key."""

    field: str


def unreadable_identity(source_index: int, line_number: int) -> Identity:
    """The synthetic identity of an unreadable line: its own task, rollout 0."""
    synthetic = f"__unreadable_record__:input-{source_index}:line-{line_number}"
    return Identity(synthetic, 0, None, f"{synthetic}-0")


def _coerce(value: Any) -> TaskIndex:
    # Fast path for the common exact types; bool is an int subclass and must be coerced.
    if type(value) is int or type(value) is str:
        return value
    from pydantic import ValidationError

    try:
        return _index_adapter().validate_python(value)
    except ValidationError:
        raise _Uncoercible from None


def resolve_identity(record: dict[str, Any], ordinal: int) -> Identity | InvalidIdentity:
    """Identity of a readable record at non-blank position ``ordinal``."""
    trajectory = record.get("ng_trajectory")
    return identity_of(
        record.get(TASK_INDEX_KEY, ordinal),
        record.get(ROLLOUT_INDEX_KEY, 0),
        record.get(STAGE_INDEX_KEY),
        record.get(ROLLOUT_ID_KEY),
        trajectory.get("rollout_id") if isinstance(trajectory, dict) else None,
    )


def identity_of(
    raw_task: Any, raw_rollout: Any, raw_stage: Any, rollout_id: Any, trajectory_rollout_id: Any
) -> Identity | InvalidIdentity:
    """Identity from a record's raw values (the defaults already applied to absent keys)."""
    try:
        task_index = _coerce(raw_task)
    except _Uncoercible:
        return InvalidIdentity(TASK_INDEX_KEY)
    try:
        rollout_index = _coerce(raw_rollout)
    except _Uncoercible:
        return InvalidIdentity(ROLLOUT_INDEX_KEY)
    try:
        stage_index = None if raw_stage is None else _coerce(raw_stage)
    except _Uncoercible:
        return InvalidIdentity(STAGE_INDEX_KEY)
    if not rollout_id:
        rollout_id = trajectory_rollout_id
    if not rollout_id:
        rollout_id = f"{raw_task}-{raw_rollout}"
    return Identity(task_index, rollout_index, stage_index, str(rollout_id))
