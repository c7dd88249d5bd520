"""Rollouts in flight: started but not yet ended, with the straggler and stall rules.

Pure logic over an injected clock: the registry never reads the time itself, every method
that depends on it takes ``now``. A rollout enters on a ``started`` event (journaled, so a
restart rebuilds the registry) and leaves on its ``completed``, ``failed`` or ``drained``
event. Heartbeats are kept in memory only: after a restart a rollout counts as heartbeating
again from its next heartbeat.

Rules (all ages in seconds of the service's clock, measured from the ``started`` event's
arrival):

- **straggling**: age > threshold, where the threshold is the smaller of
  ``factor * p95`` of the run's latency tracker (once it holds ``min_samples`` samples) and
  the run's declared ``task_timeout_s``; with neither there is no threshold and no straggler;
- **stalled**: the rollout has heartbeated since this process started and its last heartbeat
  is more than ``stall_after_s`` old. A rollout that never heartbeats is never stalled.

Reads compute both exactly at ``now``. :meth:`InflightRegistry.evaluate`, called every
evaluation interval by the service, additionally stamps the first moment each rollout was
seen straggling or stalled (``flagged_at`` / ``stalled_at``) and counts those flags.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_MAX_TRACKED",
    "InflightEntry",
    "InflightRegistry",
    "InflightRules",
    "InflightView",
    "straggler_threshold",
]

#: Rollouts one run tracks at most; ``started`` events past it are counted, not tracked.
DEFAULT_MAX_TRACKED = 200_000

Index = int | str
RolloutKey = tuple[Index, Index]


@dataclass(frozen=True, slots=True)
class InflightRules:
    """The documented knobs of the straggler and stall rules."""

    #: Straggling past ``straggler_factor`` times the run's p95 task duration.
    straggler_factor: float = 3.0
    #: Tracker samples needed before the p95 rule applies (the timeout rule needs none).
    min_samples: int = 20
    #: A heartbeating rollout is stalled once its last heartbeat is older than this.
    stall_after_s: float = 120.0
    #: Seconds between two evaluations that stamp and count new flags.
    eval_interval_s: float = 5.0
    #: Rollouts tracked per run at most.
    max_tracked: int = DEFAULT_MAX_TRACKED

    def __post_init__(self) -> None:
        if not (math.isfinite(self.straggler_factor) and self.straggler_factor > 0):
            raise ValueError(f"straggler_factor must be a positive number, got {self.straggler_factor!r}")
        if self.min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {self.min_samples!r}")
        if not (math.isfinite(self.stall_after_s) and self.stall_after_s > 0):
            raise ValueError(f"stall_after_s must be a positive number, got {self.stall_after_s!r}")
        if not (math.isfinite(self.eval_interval_s) and self.eval_interval_s > 0):
            raise ValueError(f"eval_interval_s must be a positive number, got {self.eval_interval_s!r}")
        if self.max_tracked < 1:
            raise ValueError(f"max_tracked must be >= 1, got {self.max_tracked!r}")


def straggler_threshold(
    rules: InflightRules, *, p95: float | None, samples: int, task_timeout_s: float | None
) -> float | None:
    """Age past which a rollout straggles: min(factor * p95, task timeout); ``None``: no rule applies."""
    candidates = []
    if p95 is not None and samples >= rules.min_samples and math.isfinite(p95):
        candidates.append(rules.straggler_factor * p95)
    if task_timeout_s is not None:
        candidates.append(task_timeout_s)
    return min(candidates) if candidates else None


@dataclass(slots=True)
class InflightEntry:
    """One started attempt; times are the service clock's."""

    task: Index
    rollout: Index
    attempt: int
    started_at: float
    last_heartbeat: float | None = None
    flagged_at: float | None = None
    #: The threshold it crossed when flagged (the threshold moves with the run's p95).
    flagged_threshold: float | None = None
    stalled_at: float | None = None

    def stalled(self, now: float, rules: InflightRules) -> bool:
        return self.last_heartbeat is not None and now - self.last_heartbeat > rules.stall_after_s

    def as_dict(self, now: float, threshold: float | None, rules: InflightRules) -> dict[str, Any]:
        age = now - self.started_at
        return {
            "task_index": self.task,
            "rollout_index": self.rollout,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "age_s": age,
            "straggling": threshold is not None and age > threshold,
            "flagged_at": self.flagged_at,
            "flagged_threshold_s": self.flagged_threshold,
            "last_heartbeat": self.last_heartbeat,
            "heartbeat_age_s": None if self.last_heartbeat is None else now - self.last_heartbeat,
            "stalled": self.stalled(now, rules),
            "stalled_at": self.stalled_at,
        }


@dataclass(frozen=True, slots=True)
class InflightView:
    """Counts and the age distribution at one moment."""

    count: int
    oldest_age_s: float | None
    age_quantiles: dict[str, float]
    threshold_s: float | None
    stragglers: int
    stalled: int
    untracked: int


@dataclass(slots=True)
class _Flags:
    stragglers: int = 0
    stalls: int = 0


@dataclass
class InflightRegistry:
    """Started-but-unended attempts of one run, one per ``(task, rollout)``, oldest first."""

    rules: InflightRules = field(default_factory=InflightRules)
    _entries: dict[RolloutKey, InflightEntry] = field(default_factory=dict)
    #: ``started`` events refused because ``max_tracked`` rollouts were already in flight.
    untracked: int = 0
    #: Rollouts ever stamped straggling / stalled by :meth:`evaluate` (this process).
    flags: _Flags = field(default_factory=_Flags)

    def __len__(self) -> int:
        return len(self._entries)

    # -- events ---------------------------------------------------------------------------

    def started(self, key: RolloutKey, attempt: int, at: float) -> bool:
        """Register a start; a later attempt replaces an earlier one. False if not tracked."""
        current = self._entries.get(key)
        if current is not None:
            if attempt <= current.attempt:
                return False  # the same (or an older) attempt again: nothing changes
            del self._entries[key]  # re-inserted so iteration order stays start order
        elif len(self._entries) >= self.rules.max_tracked:
            self.untracked += 1
            return False
        self._entries[key] = InflightEntry(key[0], key[1], attempt, at)
        return True

    def ended(self, key: RolloutKey, attempt: int | None) -> None:
        """The attempt ended (``None``: the rollout ended whatever its attempt, i.e. it succeeded)."""
        current = self._entries.get(key)
        if current is not None and (attempt is None or current.attempt <= attempt):
            del self._entries[key]

    def heartbeat(self, key: RolloutKey, attempt: int, at: float) -> bool:
        """A sign of life; False when the rollout is not in flight (nothing is registered)."""
        current = self._entries.get(key)
        if current is None or current.attempt != attempt:
            return False
        current.last_heartbeat = at if current.last_heartbeat is None else max(current.last_heartbeat, at)
        current.stalled_at = None  # alive again: a later silence is a new stall
        return True

    def clear(self) -> None:
        """The run ended: nothing is in flight any more."""
        self._entries.clear()

    # -- evaluation -----------------------------------------------------------------------

    def evaluate(
        self, now: float, threshold: float | None
    ) -> tuple[list[InflightEntry], list[InflightEntry]]:
        """Stamp rollouts that straggle or stall at ``now`` for the first time; returns them."""
        stragglers: list[InflightEntry] = []
        stalls: list[InflightEntry] = []
        rules = self.rules
        for entry in self._entries.values():
            if entry.flagged_at is None and threshold is not None and now - entry.started_at > threshold:
                entry.flagged_at = now
                entry.flagged_threshold = threshold
                stragglers.append(entry)
            stalled = entry.stalled(now, rules)
            if stalled and entry.stalled_at is None:
                entry.stalled_at = now
                stalls.append(entry)
            elif not stalled:
                entry.stalled_at = None
        self.flags.stragglers += len(stragglers)
        self.flags.stalls += len(stalls)
        return stragglers, stalls

    # -- reading --------------------------------------------------------------------------

    def view(self, now: float, threshold: float | None) -> InflightView:
        """Count, oldest age, exact age quantiles (nearest rank), stragglers and stalls at ``now``."""
        ages = sorted((now - entry.started_at for entry in self._entries.values()), reverse=True)
        quantiles: dict[str, float] = {}
        if ages:
            ascending = ages[::-1]
            for label, q in (("0.5", 0.5), ("0.95", 0.95), ("1.0", 1.0)):
                quantiles[label] = ascending[max(0, math.ceil(q * len(ascending)) - 1)]
        stragglers = 0 if threshold is None else sum(1 for age in ages if age > threshold)
        stalled = sum(1 for entry in self._entries.values() if entry.stalled(now, self.rules))
        return InflightView(
            count=len(ages),
            oldest_age_s=ages[0] if ages else None,
            age_quantiles=quantiles,
            threshold_s=threshold,
            stragglers=stragglers,
            stalled=stalled,
            untracked=self.untracked,
        )

    def straggler_counts(self, times: Sequence[float], threshold: float | None) -> list[int]:
        """Rollouts straggling (age > ``threshold``, as :meth:`view` counts them) at each of
        ``times``: one pass for one time, one sort for several."""
        if threshold is None or not self._entries:
            return [0] * len(times)
        if len(times) == 1:
            now = times[0]
            return [sum(1 for entry in self._entries.values() if now - entry.started_at > threshold)]
        starts = sorted(entry.started_at for entry in self._entries.values())
        counts = []
        for now in times:
            low, high = 0, len(starts)  # ages fall along ``starts``: the stragglers are a prefix
            while low < high:
                middle = (low + high) // 2
                if now - starts[middle] > threshold:
                    low = middle + 1
                else:
                    high = middle
            counts.append(low)
        return counts

    def oldest(self, limit: int) -> list[InflightEntry]:
        """The ``limit`` longest-running rollouts, oldest first."""
        return heapq.nsmallest(limit, self._entries.values(), key=lambda entry: entry.started_at)

    def as_dict(self, now: float, threshold: float | None, limit: int) -> dict[str, Any]:
        """The ``/inflight`` body (identities and times only, never payloads)."""
        view = self.view(now, threshold)
        return {
            "count": view.count,
            "oldest_age_s": view.oldest_age_s,
            "age_quantiles_s": view.age_quantiles,
            "straggler_threshold_s": view.threshold_s,
            "stragglers": view.stragglers,
            "stalled": view.stalled,
            "untracked": view.untracked,
            "flagged": {"stragglers": self.flags.stragglers, "stalled": self.flags.stalls},
            "rules": {
                "straggler_factor": self.rules.straggler_factor,
                "min_samples": self.rules.min_samples,
                "stall_after_s": self.rules.stall_after_s,
                "eval_interval_s": self.rules.eval_interval_s,
            },
            "oldest": [entry.as_dict(now, threshold, self.rules) for entry in self.oldest(limit)],
        }

    # -- persistence ----------------------------------------------------------------------

    def to_snapshot(self, *, stamps: bool = True) -> dict[str, Any]:
        """What a state snapshot keeps: started attempts and their flags (heartbeats are not kept).

        ``stamps=False`` leaves out the evaluator's flag stamps and counts, which belong to the
        process that made them: a registry rebuilt from the journal has none either.
        """
        if not stamps:
            return {
                "entries": [
                    [entry.task, entry.rollout, entry.attempt, entry.started_at, None, None]
                    for entry in self._entries.values()
                ],
                "untracked": self.untracked,
                "flags": [0, 0],
            }
        return {
            "entries": [
                [
                    entry.task,
                    entry.rollout,
                    entry.attempt,
                    entry.started_at,
                    entry.flagged_at,
                    entry.flagged_threshold,
                ]
                for entry in self._entries.values()
            ],
            "untracked": self.untracked,
            "flags": [self.flags.stragglers, self.flags.stalls],
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], rules: InflightRules | None = None) -> InflightRegistry:
        registry = cls(rules or InflightRules())
        for task, rollout, attempt, started_at, flagged_at, flagged_threshold in data["entries"]:
            registry._entries[(task, rollout)] = InflightEntry(
                task, rollout, attempt, started_at, flagged_at=flagged_at, flagged_threshold=flagged_threshold
            )
        registry.untracked = data["untracked"]
        registry.flags = _Flags(*data["flags"])
        return registry
