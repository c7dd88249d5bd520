"""Open task groups: tasks some of whose repeats still run (finished, in flight, duration CV),
at most :data:`MAX_GROUPS` held, the rest counted as ``untracked``."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

from sidecar.journal import CompletedFact, DrainedFact, Fact, FailedFact, StartedFact

__all__ = ["MAX_GROUPS", "Group", "OpenGroups"]

#: Open groups held at most per run.
MAX_GROUPS = 10_000

Index = int | str


@dataclass(slots=True)
class Group:
    finished: int = 0
    #: Finished repeats with a duration, their sum and sum of squares (the coefficient of variation).
    timed: int = 0
    total: float = 0.0
    squares: float = 0.0
    #: In-flight repeats: rollout -> start time.
    running: dict[Index, float] = field(default_factory=dict)

    def cv(self) -> float | None:
        if self.timed < 2 or self.total <= 0:
            return None
        mean = self.total / self.timed
        variance = max(0.0, self.squares / self.timed - mean * mean)
        return math.sqrt(variance) / mean


class OpenGroups:
    """The run's open task groups (see the module docstring)."""

    def __init__(self, cap: int = MAX_GROUPS) -> None:
        self.cap = cap
        self.groups: dict[Index, Group] = {}
        self.untracked = 0

    def __len__(self) -> int:
        return len(self.groups)

    def apply(self, fact: Fact) -> None:
        """Follow one fact: a start opens (or joins) its group, an end moves its repeat out of flight."""
        if isinstance(fact, StartedFact):
            group = self.groups.get(fact.task)
            if group is None:
                if len(self.groups) >= self.cap:
                    self.untracked += 1
                    return
                group = self.groups[fact.task] = Group()
            group.running[fact.rollout] = fact.received_at if fact.at is None else fact.at
        elif isinstance(fact, CompletedFact | FailedFact | DrainedFact):
            group = self.groups.get(fact.task)
            if group is None:
                return
            group.running.pop(fact.rollout, None)
            if isinstance(fact, DrainedFact) or (isinstance(fact, FailedFact) and not fact.terminal):
                return
            group.finished += 1
            seconds = fact.seconds
            if seconds is not None and seconds > 0:
                group.timed += 1
                group.total += seconds
                group.squares += seconds * seconds

    def close(self, task: Index) -> None:
        self.groups.pop(task, None)

    def clear(self) -> None:
        self.groups.clear()

    def blocking(self, now: float, limit: int, plan: dict[str, int] | None) -> list[dict[str, Any]]:
        """The ``limit`` groups waiting longest on a repeat in flight (oldest repeat first):
        O(groups) over at most :data:`MAX_GROUPS`, never over the run's history."""
        waiting = ((min(g.running.values()), task, g) for task, g in self.groups.items() if g.running)
        return [
            {
                "task_index": task,
                "planned": None if plan is None else plan.get(str(task)),
                "finished": group.finished,
                "in_flight": len(group.running),
                "duration_cv": group.cv(),
                "oldest_age_s": now - oldest,
            }
            for oldest, task, group in heapq.nsmallest(limit, waiting, key=lambda item: item[0])
        ]

    def to_snapshot(self) -> list[Any]:
        groups = [
            [task, g.finished, g.timed, g.total, g.squares, [[r, at] for r, at in g.running.items()]]
            for task, g in self.groups.items()
        ]
        return [groups, self.untracked]

    @classmethod
    def from_snapshot(cls, data: list[Any]) -> OpenGroups:
        groups, untracked = data
        out = cls()
        for task, finished, timed, total, squares, running in groups:
            out.groups[task] = Group(finished, timed, total, squares, {r: at for r, at in running})
        out.untracked = int(untracked)
        return out
