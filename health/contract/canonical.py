"""Validation of a raw ``ng_trajectory`` value and its canonical (dumped) form.

The health checks read the trajectory as pydantic's ``model_dump(mode="json")`` of the
validated record: every default filled in, coerced values in place of the originals. Both
steps can fail, and the failure is reported only by its exception class name:

* validation fails with ``"ValidationError"`` (bad type, extra key, cross-field rule);
* the dump fails with ``"ValueError"`` when a free-form (``Any``) value is nested more than
  254 arrays/objects deep, although it validated.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import ValidationError

from .models import TrajectoryRecord

__all__ = [
    "DUMP_ERROR",
    "VALIDATION_ERROR",
    "TrajectoryOutcome",
    "canonical_trajectory",
    "validate_trajectory",
]

VALIDATION_ERROR = "ValidationError"
DUMP_ERROR = "ValueError"

TrajectoryOutcome: TypeAlias = tuple[dict[str, Any], None] | tuple[None, str]
"""``(canonical, None)`` on success, ``(None, error_name)`` on failure."""


def validate_trajectory(raw: object) -> TrajectoryRecord | None:
    """The validated record, or ``None`` when ``raw`` breaks the contract."""
    try:
        return TrajectoryRecord.model_validate(raw)
    except ValidationError:
        return None


def canonical_trajectory(raw: object) -> TrajectoryOutcome:
    """Validate ``raw`` and dump it to plain JSON data, exactly as NeMo Gym 0.7.0 does.

    ``raw`` is any value parsed from JSON (a non-object fails validation). Returns the
    canonical trajectory or the error name (:data:`VALIDATION_ERROR` / :data:`DUMP_ERROR`).
    """
    record = validate_trajectory(raw)
    if record is None:
        return None, VALIDATION_ERROR
    try:
        return record.model_dump(mode="json"), None
    except ValueError:
        return None, DUMP_ERROR
