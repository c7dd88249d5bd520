"""Per-rollout accounting of a run: what succeeded, failed, drained, and which tasks are complete.

Pure bookkeeping, no I/O. One small integer per (task, rollout) holds its status bits and
failed-attempt count, so a 100k-rollout run costs a few megabytes. The identity is the
*normalized* index (``bool``/integral ``float`` -> ``int``, as the health digest coerces it),
and a plan is keyed by ``str(task_index)`` as ``quality_summary.json`` keys its tasks.

A rollout is *resolved* when its outcome is final for this run: a success, a terminal
failure, or ``max_attempts`` failed attempts (NeMo Gym's resume gate). A task is *complete*
when all of its planned repeats are resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Accounting", "AccountingSnapshot", "RolloutKey", "normalize_index"]

RolloutKey = tuple[int | str, int | str]

_SUCCEEDED = 1
_FAILED = 2
_TERMINAL = 4
_DRAINED = 8
_RESOLVED = 16
_ATTEMPT_SHIFT = 5
# A rollout's class as a snapshot counts it: its latest state, or outside the plan.
_C_NONE, _C_SUCCEEDED, _C_FAILED, _C_TERMINAL, _C_DRAINED, _UNPLANNED = range(6)
_CLASSES = 6


def normalize_index(value: Any) -> int | str:
    """The index as the health digest reports it (coerced), or a stable text form otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | str):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return orjson.dumps(value).decode()


@dataclass(frozen=True, slots=True)
class AccountingSnapshot:
    """One rollout identity counts once, by its latest state: ``succeeded`` (a success, even after
    failed attempts), else ``failed`` (``failed_terminal`` is the subset that will not be retried),
    else ``drained``.

    With a plan these count the planned rollouts, so ``expected = succeeded + failed + drained +
    missing`` (``missing``: planned rollouts nothing was heard of), and ``unplanned`` counts the
    rollouts outside the plan. Without a plan they count every rollout heard of, and the
    plan-relative fields (``expected``, ``missing``, ``pending``, ``unplanned``,
    ``tasks_planned``) are ``None``. ``pending`` (planned rollouts that may still change: missing
    or retryable) is ``0`` once the run ended.
    """

    expected: int | None
    succeeded: int
    failed: int
    failed_terminal: int
    failed_attempts: int
    drained: int
    missing: int | None
    pending: int | None
    unplanned: int | None
    tasks_planned: int | None
    tasks_complete: int

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class Accounting:
    """Status of every rollout heard of, and completeness of planned tasks."""

    __slots__ = (
        "_classes",
        "_complete",
        "_expected",
        "_failed_attempts",
        "_max_attempts",
        "_plan",
        "_resolved",
        "_status",
        "_with_success",
    )

    def __init__(self, plan: dict[str, int] | None, max_attempts: int) -> None:
        self._plan = plan
        self._max_attempts = max_attempts
        self._status: dict[RolloutKey, int] = {}
        self._resolved: dict[str, int] = {}
        self._complete: set[str] = set()
        self._with_success: set[str] = set()
        self._failed_attempts = 0
        #: rollouts per class (``_class_of``), kept as statuses change so a snapshot is O(1)
        self._classes = [0] * _CLASSES
        self._expected = sum(plan.values()) if plan is not None else None

    @property
    def plan(self) -> dict[str, int] | None:
        return self._plan

    def _planned(self, key: RolloutKey) -> bool:
        if self._plan is None:
            return False
        repeats = self._plan.get(str(key[0]))
        rollout = key[1]
        return repeats is not None and isinstance(rollout, int) and 0 <= rollout < repeats

    def _update(self, key: RolloutKey, bits: int, attempts: int = 0) -> int | str | None:
        """Set bits; return the task index if this completed a planned task that has a success
        (only those have rows, hence digests, to close)."""
        old = self._status.get(key, 0)
        new = (old | bits) + (attempts << _ATTEMPT_SHIFT)
        attempts_now = new >> _ATTEMPT_SHIFT
        if not old & _RESOLVED and (
            new & (_SUCCEEDED | _TERMINAL) or (new & _FAILED and attempts_now >= self._max_attempts)
        ):
            new |= _RESOLVED
        self._status[key] = new
        planned = self._planned(key)
        classes = self._classes
        if old:
            classes[self._class_of(old, planned)] -= 1
        classes[self._class_of(new, planned)] += 1
        if planned and new & _SUCCEEDED:
            self._with_success.add(str(key[0]))
        if new & _RESOLVED and not old & _RESOLVED and planned:
            task = str(key[0])
            done = self._resolved.get(task, 0) + 1
            self._resolved[task] = done
            assert self._plan is not None
            if done >= self._plan[task] and task not in self._complete:
                self._complete.add(task)
                return key[0] if task in self._with_success else None
        return None

    def _class_of(self, status: int, planned: bool) -> int:
        if self._plan is not None and not planned:
            return _UNPLANNED
        if status & _SUCCEEDED:
            return _C_SUCCEEDED
        if status & _FAILED:
            return _C_TERMINAL if status & _TERMINAL else _C_FAILED
        if status & _DRAINED:
            return _C_DRAINED
        return _C_NONE

    def succeeded(self, key: RolloutKey) -> int | str | None:
        return self._update(key, _SUCCEEDED)

    def failed(self, key: RolloutKey, *, terminal: bool) -> int | str | None:
        self._failed_attempts += 1
        return self._update(key, _FAILED | (_TERMINAL if terminal else 0), attempts=1)

    def drained(self, key: RolloutKey) -> int | str | None:
        return self._update(key, _DRAINED)

    def has_succeeded(self, key: RolloutKey) -> bool:
        return bool(self._status.get(key, 0) & _SUCCEEDED)

    def succeeded_tasks(self) -> list[int | str]:
        """Every task with at least one success, in first-seen order (O(rollouts); for run end)."""
        seen: dict[int | str, None] = {}
        for (task, _), status in self._status.items():
            if status & _SUCCEEDED:
                seen[task] = None
        return list(seen)

    def snapshot(self, *, ended: bool = False) -> AccountingSnapshot:
        """The counts now; ``ended``: the run is over, so nothing is pending any more."""
        classes = self._classes
        succeeded, drained, unplanned = classes[_C_SUCCEEDED], classes[_C_DRAINED], classes[_UNPLANNED]
        terminal = classes[_C_TERMINAL]
        failed = classes[_C_FAILED] + terminal
        with_plan = self._plan is not None
        expected = missing = pending = None
        if self._plan is not None:
            expected = self._expected
            assert expected is not None
            missing = expected - succeeded - failed - drained
            pending = 0 if ended else expected - succeeded - terminal - drained
        return AccountingSnapshot(
            expected=expected,
            succeeded=succeeded,
            failed=failed,
            failed_terminal=terminal,
            failed_attempts=self._failed_attempts,
            drained=drained,
            missing=missing,
            pending=pending,
            unplanned=unplanned if with_plan else None,
            tasks_planned=len(self._plan) if self._plan is not None else None,
            tasks_complete=len(self._complete),
        )
