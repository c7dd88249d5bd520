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

__all__ = [
    "CoverageState",
    "RepeatInput",
    "RepeatTally",
    "TaskChecks",
    "TaskOutcome",
    "judge_task",
    "reduce_task",
    "tally_repeats",
    "task_checks",
    "task_findings",
]

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


class RepeatTally(NamedTuple):
    """A task's repeats after the collapse by rollout index: all the task checks read."""

    repeats: int
    healthy: int
    unhealthy: int
    all_policy_observed: bool
    """Every repeat's policy calls were observed (vacuously true without repeats)."""
    any_successful: bool


def tally_repeats(members: Iterable[RepeatInput]) -> RepeatTally:
    """Collapse ``members`` by rollout index (copies that disagree on the verdict count as
    unobserved; policy observed only if every copy's was; the most successful calls) and count."""
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
    return RepeatTally(len(repeats), healthy, unhealthy, all_policy_observed, any_successful)


class TaskChecks(NamedTuple):
    """Both task checks' coverage states for one task, and the flags they raised (registry order)."""

    consistently_unhealthy: CoverageState
    no_successful_calls: CoverageState
    flags: tuple[str, ...]


def task_checks(tally: RepeatTally, ignored: frozenset[str]) -> TaskChecks:
    """Run both task checks over a task's collapsed repeats."""
    computable = tally.healthy + tally.unhealthy
    flags: list[str] = []

    consistency: CoverageState
    if CONSISTENTLY_UNHEALTHY in ignored:
        consistency = "ignored"
    elif computable >= 2:
        consistency = "evaluated"
        if tally.unhealthy == computable:
            flags.append(CONSISTENTLY_UNHEALTHY)
    else:
        consistency = "unobserved"

    no_success: CoverageState
    if NO_SUCCESSFUL_CALLS in ignored:
        no_success = "ignored"
    elif tally.repeats and tally.all_policy_observed:
        no_success = "evaluated"
        if not tally.any_successful:
            flags.append(NO_SUCCESSFUL_CALLS)
    else:
        no_success = "unobserved"
    return TaskChecks(consistency, no_success, tuple(flags))


def judge_task(task_index: TaskIndex, tally: RepeatTally, ignored: frozenset[str]) -> TaskOutcome:
    """A task's outcome from its collapsed repeats."""
    consistency, no_success, flags = task_checks(tally, ignored)
    computable = tally.healthy + tally.unhealthy
    return TaskOutcome(
        task_index=task_index,
        repeats=tally.repeats,
        healthy=tally.healthy,
        unhealthy=tally.unhealthy,
        unobserved=tally.repeats - computable,
        consistently_unhealthy=consistency,
        no_successful_calls=no_success,
        computable_repeats=computable,
        flags=flags,
    )


def reduce_task(
    task_index: TaskIndex, members: Iterable[RepeatInput], ignored: frozenset[str]
) -> TaskOutcome:
    """Collapse ``members`` by rollout index and run both task checks."""
    return judge_task(task_index, tally_repeats(members), ignored)


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
