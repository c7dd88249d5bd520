"""Why a run came out mostly unobserved, in one line for a person (never part of the report files):
usually rows written without an ``ng_trajectory`` (capture off, or an older NeMo Gym).
"""

from __future__ import annotations

from typing import Any

from .check_terms import CheckInput
from .registry import CHECK_IDS, check_reads

__all__ = ["TRAJECTORY_CHECK_IDS", "explain_unobserved"]

TRAJECTORY_CHECK_IDS: tuple[str, ...] = tuple(
    check_id for check_id in CHECK_IDS if CheckInput.TRAJECTORY in check_reads(check_id)
)
"""The rollout checks that read ``ng_trajectory``: all unobserved on a row without one."""


def explain_unobserved(summary: dict[str, Any]) -> str | None:
    """Why most checked rows (more than half) are unobserved, from ``quality_summary.json``
    (its ``run.verdicts`` and ``run.artifacts.coverage``); else ``None``."""
    run = summary["run"]
    verdicts = run["verdicts"]
    unobserved = verdicts["unobserved"]
    total = sum(verdicts.values())
    if unobserved * 2 <= total:
        return None
    lead = f"{unobserved} unobserved" if unobserved == total else f"{unobserved} of {total} unobserved"
    coverage = run["artifacts"]["coverage"]
    active = [check for check in TRAJECTORY_CHECK_IDS if coverage[check]["ignored"] == 0]
    if all(coverage[check]["unobserved"] >= unobserved for check in active):
        return (
            f"{lead}: no ng_trajectory in these rows (or none the checks could use), "
            "so no trajectory check could run; turn on NeMo Gym's trajectory capture (docs/report.md)"
        )
    blind = [check for check in active if coverage[check]["unobserved"] > 0]
    return (
        f"{lead}: the rows' ng_trajectory lacks what these checks need: "
        f"{', '.join(blind)} (coverage in quality_summary.json; docs/report.md)"
    )
