"""Validation of a raw ``ng_trajectory`` value and its canonical (dumped) form.

The checks read pydantic's ``model_dump(mode="json")`` of the validated record; a failure is
reported by its exception class name (``ValidationError``, ``TypeError`` from conversation
routing, or ``ValueError`` from a dump nested past 254 levels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from .models import TrajectoryRecord

__all__ = [
    "DUMP_ERROR",
    "VALIDATION_ERROR",
    "TrajectoryOutcome",
    "canonical_trajectory",
    "check_trajectory",
    "validate_trajectory",
]

VALIDATION_ERROR = "ValidationError"
DUMP_ERROR = "ValueError"

TrajectoryOutcome: TypeAlias = tuple[dict[str, Any], None] | tuple[None, str]
"""``(canonical, None)`` on success, ``(None, error_name)`` on failure."""


def check_trajectory(raw: object) -> tuple[TrajectoryRecord, None] | tuple[None, str]:
    """``(record, None)``, or ``(None, error_name)`` when validating ``raw`` raises (the exception's
    class name, as NeMo Gym reports it)."""
    from pydantic import ValidationError  # imported, like the models, only when a record needs them

    from .models import TrajectoryRecord  # built on the first record that needs the contract

    try:
        return TrajectoryRecord.model_validate(raw), None
    except ValidationError:
        return None, VALIDATION_ERROR
    except Exception as exc:  # the reference reports whatever validation raised, by name
        return None, type(exc).__name__


def validate_trajectory(raw: object) -> TrajectoryRecord | None:
    """The validated record, or ``None`` when ``raw`` breaks the contract."""
    return check_trajectory(raw)[0]


def canonical_trajectory(raw: object) -> TrajectoryOutcome:
    """Validate ``raw`` and dump it to plain JSON data, exactly as NeMo Gym 0.7.0 does: the
    canonical trajectory or the error name."""
    record, error = check_trajectory(raw)
    if record is None:
        return None, error or VALIDATION_ERROR
    try:
        return record.model_dump(mode="json"), None
    except Exception as exc:  # depth overflow raises ValueError; report any failure by name
        return None, type(exc).__name__
