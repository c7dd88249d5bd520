"""NeMo-Gym-exact rollout health checks: a pure per-record step, a reducer, and a batch runner.

Importing the package is light: the per-record step (``health.digest``, which builds the
pydantic ``ng_trajectory`` models) is imported on first use, by the runner's workers.
"""

from __future__ import annotations

from .api import (
    HealthRun,
    check_rollout_files,
    format_health_report,
    health_check_run_dir,
    run_health_checks,
)
from .compact import CompactDigest
from .ignored import normalize_ignored_checks
from .reduce import HealthReducer
from .registry import CHECK_IDS, CHECK_REGISTRY
from .types import CheckInput, CheckScope, CheckSpec, CheckSubject, Finding, HealthCheckResult, RolloutDigest

__all__ = [
    "CHECK_IDS",
    "CHECK_REGISTRY",
    "CheckInput",
    "CheckScope",
    "CheckSpec",
    "CheckSubject",
    "CompactDigest",
    "Finding",
    "HealthCheckResult",
    "HealthReducer",
    "HealthRun",
    "RolloutDigest",
    "check_rollout_files",
    "format_health_report",
    "health_check_run_dir",
    "normalize_ignored_checks",
    "run_health_checks",
]
