"""NeMo-Gym-exact rollout health checks: a pure per-record step, a reducer, and a batch runner."""

from __future__ import annotations

from .registry import CHECK_IDS, CHECK_REGISTRY
from .types import CheckInput, CheckScope, CheckSpec, CheckSubject, Finding, HealthCheckResult, RolloutDigest

__all__ = [
    "CHECK_IDS",
    "CHECK_REGISTRY",
    "CheckInput",
    "CheckScope",
    "CheckSpec",
    "CheckSubject",
    "Finding",
    "HealthCheckResult",
    "RolloutDigest",
]
