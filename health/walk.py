"""The rollout checks' walk: each check in registry order, gated by the evidence it reads.

A check whose inputs were not observed is *unobserved* (no finding); one whose rule raises is
unobserved too and yields a ``check_execution_error`` finding instead. The walk's outcome is
the findings as :class:`~health.compact.PlainFinding` in emission order, and the unobserved IDs
in registry order; :func:`compact_from_walk` packs them with the statistics into a digest.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from msgspec import Struct

from .check_terms import CheckInput
from .checks import ROLLOUT_RULES, CheckRule, ended_chains
from .compact import (
    CAPTURE_OBSERVED,
    ENDED_ON_ERROR,
    HEALTHY,
    POLICY_CALLS_OBSERVED,
    UNHEALTHY,
    UNOBSERVED,
    CompactDigest,
    PlainFinding,
    finding_positions,
    render_findings,
    unobserved_mask,
)
from .evidence import Evidence
from .identity import Identity
from .registry import ROLLOUT_CHECK_IDS, check_reads

__all__ = ["BindingView", "WalkOutcome", "compact_from_walk", "walk"]

CHECK_EXECUTION_ERROR = "check_execution_error"
RECORD_UNREADABLE = "record_unreadable"


class WalkOutcome(Struct):
    """The findings in the order the walk emits them, and the unobserved check IDs (a struct:
    one is built per row, in C)."""

    findings: list[PlainFinding]
    unobserved: list[str]


class BindingView(IntEnum):
    """Which resolved references a check reads; the value indexes the walk's views tuple."""

    NONE = 0
    """Reads no binding: only the other evidence gates apply."""
    TURN = 1
    """The turns' references (``bound_calls``)."""
    OWNED = 2
    """Every owned reference, turns first then invocation-only (``owned_model_calls``)."""


class _Step(NamedTuple):
    """One rollout check with the evidence gates its ``reads`` imply: no finding where that
    evidence was not observed."""

    check_id: str
    reads_trajectory: bool
    reads_turns: bool
    reads_observed_calls: bool
    view: BindingView
    rule: CheckRule


def _step(check_id: str) -> _Step:
    reads = check_reads(check_id)
    if CheckInput.BOUND_CALLS in reads:
        view = BindingView.TURN
    elif CheckInput.OWNED_MODEL_CALLS in reads:
        view = BindingView.OWNED
    else:
        view = BindingView.NONE
    return _Step(
        check_id,
        CheckInput.TRAJECTORY in reads,
        CheckInput.AGENT_TURNS in reads,
        CheckInput.OBSERVED_MODEL_CALLS in reads,
        view,
        ROLLOUT_RULES[check_id],
    )


_STEPS: tuple[_Step, ...] = tuple(_step(check_id) for check_id in ROLLOUT_CHECK_IDS)


def _run_rule(
    check_id: str,
    rule: CheckRule,
    evidence: Evidence,
    ignored_checks: frozenset[str],
    outcome: WalkOutcome,
) -> None:
    """Run one check whose gates passed, adding its findings (or its crash) to ``outcome``."""
    try:
        raw_findings = rule.run(evidence)
    except Exception as exc:  # a rule crashing on odd data is itself a reported outcome
        outcome.unobserved.append(check_id)
        if CHECK_EXECUTION_ERROR not in ignored_checks:
            detail = {
                "reason": "check raised an unexpected exception",
                "failed_check": check_id,
                "error": type(exc).__name__,
            }
            outcome.findings.append(PlainFinding(CHECK_EXECUTION_ERROR, None, detail))
        return
    if raw_findings:
        outcome.findings.extend([PlainFinding(check_id, locator, detail) for locator, detail in raw_findings])


def walk(evidence: Evidence, trajectory_error: str | None, ignored_checks: frozenset[str]) -> WalkOutcome:
    """Walk the rollout checks in registry order with their gates."""
    outcome = WalkOutcome([], [])
    unobserved = outcome.unobserved
    # Hoisted out of the loop: what evidence each kind of input needs.
    trajectory_observed = evidence.trajectory_observed
    turns_observed = evidence.turns_observed
    calls_observed = evidence.model_calls_observed
    observed_calls = calls_observed and bool(evidence.calls)
    # Indexed by BindingView: NONE's slot is never read (a NONE step is falsy below).
    views = (evidence.turn_binding, evidence.turn_binding, evidence.owned_binding)
    for check_id, reads_trajectory, reads_turns, reads_observed_calls, view, rule in _STEPS:
        if ignored_checks and check_id in ignored_checks:
            continue
        if check_id == RECORD_UNREADABLE:
            if trajectory_error is not None:
                detail = {"reason": "canonical trajectory is unreadable", "error": trajectory_error}
                outcome.findings.append(PlainFinding(check_id, None, detail))
            continue
        if (
            (reads_trajectory and not trajectory_observed)
            or (reads_turns and not turns_observed)
            or (reads_observed_calls and not observed_calls)
            or (
                view
                and (not calls_observed or (rule.gate is not None and not rule.gate(evidence, views[view])))
            )
        ):
            unobserved.append(check_id)
            continue
        _run_rule(check_id, rule, evidence, ignored_checks, outcome)
    return outcome


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


def compact_from_walk(identity: Identity, ev: Evidence, outcome: WalkOutcome, ordinal: int) -> CompactDigest:
    """The digest, compact: the walk's outcome and the statistics (calls, failures by status,
    tokens), without ``Finding`` models (:func:`~health.compact.expand_digest` builds them)."""
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
