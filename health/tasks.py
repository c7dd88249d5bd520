"""Task-level reduction: collapse repeats and evaluate the two task checks.

Pure functions over the post-duplicate verdicts of one task's digests; the reducer calls
them for every task when it builds a summary and for one task when the caller closes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from .check_terms import TaskIndex, Verdict

if TYPE_CHECKING:
    from .types import Finding

__all__ = ["CoverageState", "RepeatInput", "TaskOutcome", "reduce_task", "task_findings"]

CoverageState = Literal["evaluated", "unobserved", "ignored"]

CONSISTENTLY_UNHEALTHY = "task_consistently_unhealthy"
NO_SUCCESSFUL_CALLS = "task_no_successful_model_calls"


class RepeatInput(NamedTuple):
    """What task reduction reads from one digest."""

    rollout_index: TaskIndex
    verdict: Verdict
    """The verdict after the duplicate-identity post-pass."""
    policy_calls_observed: bool
    successful_model_calls: int


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """One task group's repeat counts, task-check coverage and flags."""

    task_index: TaskIndex
    repeats: int
    healthy: int
    unhealthy: int
    unobserved: int
    consistently_unhealthy: CoverageState
    no_successful_calls: CoverageState
    computable_repeats: int
    flags: tuple[str, ...]


def reduce_task(
    task_index: TaskIndex, members: Iterable[RepeatInput], ignored: frozenset[str]
) -> TaskOutcome:
    """Collapse ``members`` by rollout index and run both task checks."""
    repeats: dict[TaskIndex, tuple[Verdict, bool, int]] = {}
    for rollout_index, verdict, policy_observed, successful in members:
        previous = repeats.get(rollout_index)
        if previous is None:
            repeats[rollout_index] = (verdict, policy_observed, successful)
        else:
            kept_verdict, kept_policy, kept_successful = previous
            repeats[rollout_index] = (
                kept_verdict if kept_verdict == verdict else "unobserved",
                kept_policy and policy_observed,
                max(kept_successful, successful),
            )
    healthy = unhealthy = 0
    all_policy_observed = True
    any_successful = False
    for verdict, policy_observed, successful in repeats.values():
        if verdict == "healthy":
            healthy += 1
        elif verdict == "unhealthy":
            unhealthy += 1
        all_policy_observed = all_policy_observed and policy_observed
        any_successful = any_successful or successful > 0
    computable = healthy + unhealthy
    flags: list[str] = []

    consistency: CoverageState
    if CONSISTENTLY_UNHEALTHY in ignored:
        consistency = "ignored"
    elif computable >= 2:
        consistency = "evaluated"
        if unhealthy == computable:
            flags.append(CONSISTENTLY_UNHEALTHY)
    else:
        consistency = "unobserved"

    no_success: CoverageState
    if NO_SUCCESSFUL_CALLS in ignored:
        no_success = "ignored"
    elif repeats and all_policy_observed:
        no_success = "evaluated"
        if not any_successful:
            flags.append(NO_SUCCESSFUL_CALLS)
    else:
        no_success = "unobserved"

    return TaskOutcome(
        task_index=task_index,
        repeats=len(repeats),
        healthy=healthy,
        unhealthy=unhealthy,
        unobserved=len(repeats) - computable,
        consistently_unhealthy=consistency,
        no_successful_calls=no_success,
        computable_repeats=computable,
        flags=tuple(flags),
    )


def task_findings(outcome: TaskOutcome) -> list[Finding]:
    """The task-scope findings behind ``outcome.flags``, in registry order."""
    from .types import Finding

    subject: dict[str, int | str] = {"_ng_task_index": outcome.task_index}
    findings: list[Finding] = []
    if CONSISTENTLY_UNHEALTHY in outcome.flags:
        findings.append(
            Finding(
                check=CONSISTENTLY_UNHEALTHY,
                subject=subject,
                detail={"computable_repeats": outcome.computable_repeats},
            )
        )
    if NO_SUCCESSFUL_CALLS in outcome.flags:
        findings.append(
            Finding(check=NO_SUCCESSFUL_CALLS, subject=subject, detail={"repeats": outcome.repeats})
        )
    return findings
