"""The ``ng_trajectory`` contract: pydantic v2 models, their validation and canonical dump, and
the msgspec structs derived from them (:mod:`health.contract.strict`).

Imports pydantic and the standard library only: light clients (``sidecar.perf``) import it
without the rest of the health pipeline.
"""

from __future__ import annotations

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
