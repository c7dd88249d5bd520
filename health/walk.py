"""The rollout checks' walk: each check in registry order, gated by the evidence it reads.

A check whose inputs were not observed is *unobserved* (no finding); one whose rule raises is
unobserved too and yields a ``check_execution_error`` finding instead. The walk's outcome is
the findings as :class:`~health.compact.PlainFinding` in emission order, and the unobserved IDs
in registry order; :mod:`health.digest_forms` turns them into a digest.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from msgspec import Struct

from .check_terms import CheckInput
from .checks import ROLLOUT_RULES, CheckRule
from .compact import PlainFinding
from .evidence import Evidence
from .registry import ROLLOUT_CHECK_IDS, check_reads

__all__ = ["BindingView", "WalkOutcome", "walk"]

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
