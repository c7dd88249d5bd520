"""NeMo-Gym-exact rollout health checks: a pure per-record step, a reducer, and a batch runner.

Importing the package is light: every public name is imported on first access, so a
submodule (``health.contract``, which the client's perf core needs) loads without the runner,
the reducer or the report writers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_exports import lazy_exports

if TYPE_CHECKING:
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
    from .types import (
        CheckInput,
        CheckScope,
        CheckSpec,
        CheckSubject,
        Finding,
        HealthCheckResult,
        RolloutDigest,
    )

#: Where each public name lives (imported on first access, see the module notes).
_SOURCES = {
    "HealthRun": "api",
    "check_rollout_files": "api",
    "format_health_report": "api",
    "health_check_run_dir": "api",
    "run_health_checks": "api",
    "CompactDigest": "compact",
    "normalize_ignored_checks": "ignored",
    "HealthReducer": "reduce",
    "CHECK_IDS": "registry",
    "CHECK_REGISTRY": "registry",
    "CheckInput": "types",
    "CheckScope": "types",
    "CheckSpec": "types",
    "CheckSubject": "types",
    "Finding": "types",
    "HealthCheckResult": "types",
    "RolloutDigest": "types",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _SOURCES, __all__)
