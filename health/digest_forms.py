"""A rollout's digest from its walk: the pydantic ``RolloutDigest``, or straight to its compact form.

Both read the same evidence and walk outcome and agree field for field
(``compact_from_walk(...) == compact_digest(digest_from_walk(...))``); the compact form skips
the digest's dict and its ``Finding`` models (and so never imports pydantic), which the batch
workers and the live engine would only pack again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import ended_chains
from .compact import (
    CAPTURE_OBSERVED,
    ENDED_ON_ERROR,
    HEALTHY,
    POLICY_CALLS_OBSERVED,
    UNHEALTHY,
    UNOBSERVED,
    CompactDigest,
    finding_positions,
    materialized_digest,
    render_findings,
    unobserved_mask,
)
from .evidence import Evidence
from .identity import Identity
from .walk import WalkOutcome

if TYPE_CHECKING:
    from .types import RolloutDigest

__all__ = ["compact_from_walk", "digest_from_walk"]

_NO_FINDINGS = b"[]"


def _call_statistics(ev: Evidence) -> tuple[bool, int, dict[str, int], bool]:
    """The digest statistics not read straight off the evidence: whether the policy calls
    were observed, the successful model calls, the failed calls by status, whether the
    rollout ended on an error (a plain tuple: one is built per row)."""
    failed_calls = ev.failed_calls
    errors_by_status: dict[str, int] = {}
    for call in failed_calls:
        status = "unknown" if call.status_code is None else str(call.status_code)
        errors_by_status[status] = errors_by_status.get(status, 0) + 1
    turn_binding = ev.turn_binding
    matched = turn_binding.matched_calls
    return (
        ev.turn_call_scope_complete and turn_binding.complete,
        len(matched) if ev.all_successful else sum(1 for call in matched if call.successful),
        errors_by_status,
        bool(failed_calls) and bool(ended_chains(ev)),
    )


def digest_from_walk(identity: Identity, ev: Evidence, outcome: WalkOutcome, ordinal: int) -> RolloutDigest:
    """The digest: the walk's outcome and the statistics (calls, failures by status, tokens)."""
    findings = outcome.findings
    unobserved = outcome.unobserved
    calls = ev.calls
    policy_calls_observed, successful_model_calls, errors_by_status, ended_on_error = _call_statistics(ev)
    return materialized_digest(
        {
            "task_index": identity.task_index,
            "rollout_index": identity.rollout_index,
            "stage_index": identity.stage_index,
            "rollout_id": identity.rollout_id,
            "verdict": "unhealthy" if findings else "unobserved" if unobserved else "healthy",
            "findings": findings,
            "unobserved": unobserved,
            "capture_observed": bool(calls),
            "policy_calls_observed": policy_calls_observed,
            "model_calls": len(calls),
            "successful_model_calls": successful_model_calls,
            "model_call_errors": len(ev.failed_calls),
            "errors_by_status": errors_by_status,
            "ended_on_error": ended_on_error,
            "duplicated_calls": ev.duplicated_calls,
            "transcript_prompt_tokens": ev.transcript_prompt or 0,
            "transcript_completion_tokens": ev.transcript_completion or 0,
            "capture_prompt_tokens": ev.capture_prompt,
            "capture_completion_tokens": ev.capture_completion,
            "ordinal": ordinal,
        }
    )


def compact_from_walk(identity: Identity, ev: Evidence, outcome: WalkOutcome, ordinal: int) -> CompactDigest:
    """:func:`digest_from_walk` packed as :func:`~health.compact.compact_digest` packs it, without
    the digest and its ``Finding`` models."""
    findings = outcome.findings
    unobserved = outcome.unobserved
    calls = ev.calls
    policy_calls_observed, successful_model_calls, errors_by_status, ended_on_error = _call_statistics(ev)
    if findings:
        verdict = UNHEALTHY
        rendered = render_findings(findings)
        positions = finding_positions(findings)
    else:
        verdict = UNOBSERVED if unobserved else HEALTHY
        rendered = _NO_FINDINGS
        positions = ()
    return CompactDigest(
        ordinal,
        identity.task_index,
        identity.rollout_index,
        identity.stage_index,
        identity.rollout_id,
        verdict,
        rendered,
        positions,
        unobserved_mask(unobserved),
        (CAPTURE_OBSERVED if calls else 0)
        | (POLICY_CALLS_OBSERVED if policy_calls_observed else 0)
        | (ENDED_ON_ERROR if ended_on_error else 0),
        len(calls),
        successful_model_calls,
        len(ev.failed_calls),
        tuple(errors_by_status.items()) if errors_by_status else (),
        ev.duplicated_calls,
        ev.transcript_prompt or 0,
        ev.transcript_completion or 0,
        ev.capture_prompt,
        ev.capture_completion,
    )
