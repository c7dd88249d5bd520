"""The ``ng_trajectory`` contract: pydantic v2 models and the canonical (dumped) trajectory.

Imports pydantic and the standard library only: light clients (``sidecar.perf``)
import it without the rest of the health pipeline. Every public name is imported on first
access, so the batch fast path, which needs only the light recognisers in
``health.contract._conversation._fast``, does not build the pydantic models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .canonical import TrajectoryOutcome, canonical_trajectory, check_trajectory, validate_trajectory
    from .models import (
        AgentInvocation,
        ModelCallRef,
        ModelServerRef,
        ObservationGap,
        TrajectoryModelCall,
        TrajectoryRecord,
        TrajectoryResponseMetadata,
        TrajectoryTokenStats,
        TrajectoryToolCall,
        TrajectoryTurn,
    )

__all__ = [
    "AgentInvocation",
    "ModelCallRef",
    "ModelServerRef",
    "ObservationGap",
    "TrajectoryModelCall",
    "TrajectoryOutcome",
    "TrajectoryRecord",
    "TrajectoryResponseMetadata",
    "TrajectoryTokenStats",
    "TrajectoryToolCall",
    "TrajectoryTurn",
    "canonical_trajectory",
    "check_trajectory",
    "validate_trajectory",
]

_CANONICAL = frozenset(
    {"TrajectoryOutcome", "canonical_trajectory", "check_trajectory", "validate_trajectory"}
)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(".canonical" if name in _CANONICAL else ".models", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
