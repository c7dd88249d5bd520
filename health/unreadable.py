"""The digest of a line that yields no readable rollout: unparseable, or an identity NeMo Gym rejects.

Synthetic identity, a ``record_unreadable`` finding, every other rollout check unobserved, zero
statistics: built from the reason and position alone, so the pool parent or Ray driver can.
"""

from __future__ import annotations

from typing import Any

from .compact import CompactDigest, PlainFinding, compact_values
from .identity import unreadable_identity
from .registry import ROLLOUT_CHECK_IDS

__all__ = ["RECORD_UNREADABLE", "unreadable_compact"]

RECORD_UNREADABLE = "record_unreadable"


def unreadable_compact(
    detail: dict[str, Any],
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str],
) -> CompactDigest:
    """The digest of unreadable line ``line_number`` of input ``source_index``; ``detail`` says why."""
    identity = unreadable_identity(source_index, line_number)
    findings: list[PlainFinding] = []
    unobserved: list[str] = []
    for check_id in ROLLOUT_CHECK_IDS:
        if check_id in ignored_checks:
            continue
        if check_id == RECORD_UNREADABLE:
            locator: dict[str, Any] = {"source_file": source_path, "line": line_number}
            findings.append(PlainFinding(check_id, locator, detail))
        else:
            unobserved.append(check_id)
    verdict = "unhealthy" if findings else "unobserved" if unobserved else "healthy"
    values: dict[str, Any] = {
        "task_index": identity.task_index,
        "rollout_index": identity.rollout_index,
        "stage_index": None,
        "rollout_id": identity.rollout_id,
        "verdict": verdict,
        "findings": findings,
        "unobserved": unobserved,
        "capture_observed": False,
        "policy_calls_observed": False,
        "model_calls": 0,
        "successful_model_calls": 0,
        "model_call_errors": 0,
        "errors_by_status": {},
        "ended_on_error": False,
        "duplicated_calls": 0,
        "transcript_prompt_tokens": 0,
        "transcript_completion_tokens": 0,
        "capture_prompt_tokens": 0,
        "capture_completion_tokens": 0,
        "ordinal": ordinal,
    }
    return compact_values(values)
