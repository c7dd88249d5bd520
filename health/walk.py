"""The rollout checks' walk: each check in registry order, gated by the evidence it reads.

A check whose inputs were not observed is *unobserved* (no finding); one whose rule raises is
unobserved too and yields a ``check_execution_error`` finding instead. The walk's outcome is
the findings as :class:`~health.compact.PlainFinding` in emission order, and the unobserved IDs
in registry order; :mod:`health.digest_forms` turns them into a digest.

:func:`walk_plain` is the same walk for the everyday rollout (no observation gap, no check
ignored), where most gates reduce to whether a binding view holds calls: it runs only the
rules that can find something there (those on unusual calls only when there is one).
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

__all__ = ["PLAIN_WALK_APPLIES", "BindingView", "WalkOutcome", "walk", "walk_plain"]

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


_PLAIN_ORDER = (
    "check_execution_error",
    "record_unreadable",
    "rollout_duplicate_identity",
    "rollout_missing_agent_turns",
    "rollout_ended_on_failed_model_call",
    "agent_turn_hollow",
    "model_call_zero_completion_tokens",
    "model_call_missing_token_counts",
    "trajectory_capture_mismatch",
    "model_call_failed",
    "rollout_token_count_mismatch",
    "model_call_runaway_generation",
)
_PLAIN_GATES = (
    (False, False, False, BindingView.NONE),
    (False, False, False, BindingView.NONE),
    (False, False, False, BindingView.NONE),
    (True, True, False, BindingView.NONE),
    (True, False, True, BindingView.NONE),
    (True, True, False, BindingView.NONE),
    (True, False, False, BindingView.OWNED),
    (True, False, False, BindingView.OWNED),
    (True, False, False, BindingView.OWNED),
    (True, False, False, BindingView.OWNED),
    (True, False, False, BindingView.TURN),
    (True, False, False, BindingView.OWNED),
)
PLAIN_WALK_APPLIES: bool = tuple(step.check_id for step in _STEPS) == _PLAIN_ORDER and all(
    tuple(step[1:5]) == gates for step, gates in zip(_STEPS, _PLAIN_GATES, strict=True)
)
"""The registry is the one :func:`walk_plain` is written for (else the digest walks in full)."""

(
    _,
    _,
    _,
    _MISSING_TURNS,
    _ENDED_ON_FAILURE,
    _HOLLOW,
    _ZERO_COMPLETION,
    _MISSING_COUNTS,
    _CAPTURE_MISMATCH,
    _CALL_FAILED,
    _TOKEN_MISMATCH,
    _RUNAWAY,
) = _PLAIN_ORDER
_NO_OWNED_CALLS = (_ZERO_COMPLETION, _MISSING_COUNTS)
_NOTHING_IGNORED: frozenset[str] = frozenset()


def walk_plain(evidence: Evidence) -> WalkOutcome:
    """:func:`walk` for observed evidence without gaps, nothing ignored, no trajectory error.

    Then every gate holds but those on the calls: ``rollout_ended_on_failed_model_call`` needs
    a captured call; the owned-call checks need an owned call (``trajectory_capture_mismatch``
    an owned reference), the token comparison and the runaway check their own gates. The rules
    of the checks on failed, zero, uncounted or length-stopped calls find nothing without an
    unusual call (those on failures without a failed call), so they run only when there is one.
    """
    outcome = WalkOutcome([], [])
    unobserved = outcome.unobserved
    owned = evidence.owned_binding
    owned_calls = bool(owned.matched_calls)
    unusual = bool(evidence.unusual_calls)
    failed = bool(evidence.failed_calls)
    rules = ROLLOUT_RULES
    _run_rule(_MISSING_TURNS, rules[_MISSING_TURNS], evidence, _NOTHING_IGNORED, outcome)
    if not evidence.calls:
        unobserved.append(_ENDED_ON_FAILURE)
    elif failed:
        _run_rule(_ENDED_ON_FAILURE, rules[_ENDED_ON_FAILURE], evidence, _NOTHING_IGNORED, outcome)
    _run_rule(_HOLLOW, rules[_HOLLOW], evidence, _NOTHING_IGNORED, outcome)
    if not owned_calls:
        unobserved.extend(_NO_OWNED_CALLS)
    elif unusual:
        for check_id in _NO_OWNED_CALLS:
            _run_rule(check_id, rules[check_id], evidence, _NOTHING_IGNORED, outcome)
    if not owned.references:
        unobserved.append(_CAPTURE_MISMATCH)
    elif owned.missing_references or owned.duplicated_references:
        _run_rule(_CAPTURE_MISMATCH, rules[_CAPTURE_MISMATCH], evidence, _NOTHING_IGNORED, outcome)
    if not owned_calls:
        unobserved.append(_CALL_FAILED)
    elif failed:
        _run_rule(_CALL_FAILED, rules[_CALL_FAILED], evidence, _NOTHING_IGNORED, outcome)
    token_rule = rules[_TOKEN_MISMATCH]
    if token_rule.gate is not None and token_rule.gate(evidence, evidence.turn_binding):
        _run_rule(_TOKEN_MISMATCH, token_rule, evidence, _NOTHING_IGNORED, outcome)
    else:
        unobserved.append(_TOKEN_MISMATCH)
    runaway_rule = rules[_RUNAWAY]
    if not owned_calls:
        unobserved.append(_RUNAWAY)
    elif unusual:
        if runaway_rule.gate is not None and not runaway_rule.gate(evidence, owned):
            unobserved.append(_RUNAWAY)
        else:
            _run_rule(_RUNAWAY, runaway_rule, evidence, _NOTHING_IGNORED, outcome)
    return outcome
