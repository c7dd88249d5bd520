"""Rollouts in flight (started, not yet ended) and the straggler and stall rules
(docs/state.md); pure logic: every time-dependent method takes ``now``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

__all__ = [
    "DEFAULT_MAX_TOTAL",
    "DEFAULT_MAX_TRACKED",
    "InflightBudget",
    "InflightEntry",
    "InflightRegistry",
    "InflightRules",
    "InflightView",
    "straggler_threshold",
]

#: Rollouts one run tracks at most; ``started`` events past it are counted, not tracked.
DEFAULT_MAX_TRACKED = 200_000
#: Rollouts the whole service tracks at most, over all its runs (``serve --max-inflight``).
DEFAULT_MAX_TOTAL = 1_000_000

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
        for name in ("straggler_factor", "stall_after_s", "eval_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("min_samples", "max_tracked"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")


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
    #: Insertion number in its registry (orders entries that started at the same moment).
    seq: int = 0

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


class InflightBudget:
    """The in-flight cap over every run of one service (``serve --max-inflight``): a
    ``started`` event past it counts as untracked."""

    __slots__ = ("cap", "held")

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"the in-flight cap over all runs must be >= 1, got {cap!r}")
        self.cap = cap
        self.held = 0


#: One entry in an ordered index: (time, insertion number, entry); the number breaks ties so
#: entries (and identities mixing int and str) are never compared.
_Slot = tuple[float, int, InflightEntry]


def _prefix(slots: SortedList, passes: Callable[[float], bool]) -> int:
    """How many leading slots pass ``passes(time)`` (a prefix), by binary search with the
    per-entry rule itself, so rounding never makes it differ from a full walk."""
    low, high = 0, len(slots)
    while low < high:
        middle = (low + high) // 2
        if passes(slots[middle][0]):
            low = middle + 1
        else:
            high = middle
    return low


@dataclass
class InflightRegistry:
    """Started-but-unended attempts of one run, kept ordered by start and by heartbeat so
    every read costs O(log n) plus what it returns (200k entries read on the loop)."""

    rules: InflightRules = field(default_factory=InflightRules)
    _entries: dict[RolloutKey, InflightEntry] = field(default_factory=dict)
    #: ``started`` events refused because ``max_tracked`` rollouts of this run (or the service's
    #: ``--max-inflight`` over all runs) were already in flight.
    untracked: int = 0
    #: Rollouts ever stamped straggling / stalled by :meth:`evaluate` (this process).
    flags: _Flags = field(default_factory=_Flags)
    #: The service-wide cap this registry counts against (``None``: only ``max_tracked``).
    budget: InflightBudget | None = None
    _by_start: SortedList = field(default_factory=SortedList, repr=False)
    _unflagged: SortedList = field(default_factory=SortedList, repr=False)
    _by_beat: SortedList = field(default_factory=SortedList, repr=False)
    _unstalled: SortedList = field(default_factory=SortedList, repr=False)
    _next: int = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _add(self, entry: InflightEntry) -> None:
        self._entries[(entry.task, entry.rollout)] = entry
        entry.seq = self._next
        self._next += 1
        slot = (entry.started_at, entry.seq, entry)
        self._by_start.add(slot)
        if entry.flagged_at is None:
            self._unflagged.add(slot)
        if self.budget is not None:
            self.budget.held += 1

    def _remove(self, key: RolloutKey, entry: InflightEntry) -> None:
        del self._entries[key]
        slot = (entry.started_at, entry.seq, entry)
        self._by_start.remove(slot)
        if entry.flagged_at is None:
            self._unflagged.remove(slot)
        self._unbeat(entry)
        if self.budget is not None:
            self.budget.held -= 1

    def _unbeat(self, entry: InflightEntry) -> None:
        if entry.last_heartbeat is not None:
            slot = (entry.last_heartbeat, entry.seq, entry)
            self._by_beat.remove(slot)
            if entry.stalled_at is None:
                self._unstalled.remove(slot)

    def _full(self) -> bool:
        budget = self.budget
        return len(self._entries) >= self.rules.max_tracked or (
            budget is not None and budget.held >= budget.cap
        )

    def started(self, key: RolloutKey, attempt: int, at: float) -> bool:
        """Register a start; a later attempt replaces an earlier one. False if not tracked."""
        current = self._entries.get(key)
        if current is not None:
            if attempt <= current.attempt:
                return False  # the same (or an older) attempt again: nothing changes
            self._remove(key, current)  # re-inserted so iteration order stays start order
        elif self._full():
            self.untracked += 1
            return False
        self._add(InflightEntry(key[0], key[1], attempt, at))
        return True

    def ended(self, key: RolloutKey, attempt: int | None) -> None:
        """The attempt ended (``None``: the rollout ended whatever its attempt, i.e. it succeeded)."""
        current = self._entries.get(key)
        if current is not None and (attempt is None or current.attempt <= attempt):
            self._remove(key, current)

    def heartbeat(self, key: RolloutKey, attempt: int, at: float) -> bool:
        """A sign of life; False when the rollout is not in flight (nothing is registered)."""
        current = self._entries.get(key)
        if current is None or current.attempt != attempt:
            return False
        last = current.last_heartbeat
        if last is not None and at <= last and current.stalled_at is None:
            return True  # an older (or the same) sign of life: nothing moves
        self._unbeat(current)
        current.last_heartbeat = at if last is None else max(last, at)
        current.stalled_at = None  # alive again: a later silence is a new stall
        slot = (current.last_heartbeat, current.seq, current)
        self._by_beat.add(slot)
        self._unstalled.add(slot)
        return True

    def clear(self) -> None:
        """The run ended: nothing is in flight any more."""
        if self.budget is not None:
            self.budget.held -= len(self._entries)
        self._entries.clear()
        for index in (self._by_start, self._unflagged, self._by_beat, self._unstalled):
            index.clear()

    def evaluate(
        self, now: float, threshold: float | None
    ) -> tuple[list[InflightEntry], list[InflightEntry]]:
        """Stamp rollouts that straggle or stall at ``now`` for the first time; returns them."""
        stragglers: list[InflightEntry] = []
        if threshold is not None:
            count = _prefix(self._unflagged, lambda started: now - started > threshold)
            if count:
                stragglers = [slot[2] for slot in self._unflagged.islice(0, count)]
                del self._unflagged[:count]
                for entry in stragglers:
                    entry.flagged_at = now
                    entry.flagged_threshold = threshold
        stall_after = self.rules.stall_after_s
        count = _prefix(self._unstalled, lambda beat: now - beat > stall_after)
        stalls: list[InflightEntry] = []
        if count:
            stalls = [slot[2] for slot in self._unstalled.islice(0, count)]
            del self._unstalled[:count]
            for entry in stalls:
                entry.stalled_at = now
        self.flags.stragglers += len(stragglers)
        self.flags.stalls += len(stalls)
        return stragglers, stalls

    def view(self, now: float, threshold: float | None) -> InflightView:
        """Count, oldest age, exact age quantiles (nearest rank), stragglers and stalls at
        ``now``, in O(log^2 n) from the start-ordered index."""
        by_start = self._by_start
        count = len(by_start)
        quantiles: dict[str, float] = {}
        if count:
            for label, q in (("0.5", 0.5), ("0.95", 0.95), ("1.0", 1.0)):
                rank = max(0, math.ceil(q * count) - 1)  # in ages ascending
                quantiles[label] = now - by_start[count - 1 - rank][0]
        stragglers = 0 if threshold is None else _prefix(by_start, lambda started: now - started > threshold)
        stall_after = self.rules.stall_after_s
        return InflightView(
            count=count,
            oldest_age_s=now - by_start[0][0] if count else None,
            age_quantiles=quantiles,
            threshold_s=threshold,
            stragglers=stragglers,
            stalled=_prefix(self._by_beat, lambda beat: now - beat > stall_after),
            untracked=self.untracked,
        )

    def straggler_counts(self, times: Sequence[float], threshold: float | None) -> list[int]:
        """Rollouts straggling (age > ``threshold``, as :meth:`view` counts them) at each of
        ``times``: a binary search over the start-ordered index per time, O(log^2 n) each."""
        if threshold is None:
            return [0] * len(times)
        limit = threshold

        def counts_at(now: float) -> int:
            return _prefix(self._by_start, lambda started: now - started > limit)

        return [counts_at(now) for now in times]

    def oldest(self, limit: int) -> list[InflightEntry]:
        """The ``limit`` longest-running rollouts, oldest first."""
        return [slot[2] for slot in self._by_start.islice(0, limit)]

    def start_times(self, limit: int) -> list[float]:
        """At most ``limit`` start times at evenly spaced ranks, oldest first (O(limit log n))."""
        count = len(self._by_start)
        picks = range(count) if count <= limit else (i * (count - 1) // (limit - 1) for i in range(limit))
        return [self._by_start[i][0] for i in picks]

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

    def to_snapshot(self) -> dict[str, Any]:
        """What a state snapshot keeps: the started attempts, as a replay rebuilds them (heartbeats
        and the evaluator's stamps and counts belong to the process that made them)."""
        return {
            "entries": [[e.task, e.rollout, e.attempt, e.started_at] for e in self._entries.values()],
            "untracked": self.untracked,
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], rules: InflightRules | None = None) -> InflightRegistry:
        registry = cls(rules or InflightRules())
        for task, rollout, attempt, started_at in data["entries"]:
            registry._add(InflightEntry(task, rollout, int(attempt), float(started_at)))
        registry.untracked = int(data["untracked"])
        return registry
