"""Per-rollout accounting of a run: succeeded, failed, drained, and which tasks are complete
(docs/state.md); one small integer per normalized (task, rollout) identity."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson
from pydantic import ConfigDict, with_config

__all__ = ["Accounting", "AccountingSnapshot", "RolloutKey", "identity_chars", "normalize_index"]

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
# A planned task's state, the first slot of its block: resolved rollouts << 2 | flags.
_TASK_COMPLETE = 1
_TASK_WITH_SUCCESS = 2
_TASK_RESOLVED_SHIFT = 2
_FLAT_MAX = 4096
"""Tasks of at most this many planned repeats get a slot per rollout; larger ones use the dict."""
_NOT_HEARD = -2
"""``_locate``'s slot for a flat rollout whose task has no block yet (nothing heard of it)."""


def normalize_index(value: Any) -> int | str:
    """The index as the health digest reports it (coerced), or a stable text form otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | str):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return orjson.dumps(value).decode()


#: Bits of an integer whose decimal text is safely built to be measured (under the
#: interpreter's 4,300-digit conversion limit).
_MEASURED_BITS = 14_000


def identity_chars(value: int | str) -> int:
    """Characters of a normalized identity's text (``--max-identity-chars``); a huge integer's
    digit count is estimated from its bit length."""
    if type(value) is str:
        return len(value)
    bits = int(value).bit_length()
    if bits > _MEASURED_BITS:
        return int(bits * 0.30102999566398)
    return len(str(value))


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, slots=True)
class AccountingSnapshot:
    """Each rollout identity counted once by its latest state (docs/state.md "Accounting"); the
    plan-relative fields are ``None`` without a plan."""

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
    """Status of every rollout heard of, and completeness of planned tasks: planned ``int``
    tasks keep a block of ``1 + repeats`` integers in ``_slots``, every other rollout a dict entry."""

    __slots__ = (
        "_blocks",
        "_classes",
        "_complete",
        "_dense_blocks",
        "_dense_limit",
        "_expected",
        "_failed_attempts",
        "_max_attempts",
        "_plan",
        "_slots",
        "_status",
    )

    def __init__(self, plan: dict[str, int] | None, max_attempts: int) -> None:
        self._plan = plan
        self._max_attempts = max_attempts
        self._status: dict[RolloutKey, int] = {}
        self._blocks: dict[str, int] = {}
        """Planned task (its plan key) -> offset of its block in ``_slots``, for other tasks."""
        self._dense_blocks = array("q")
        """Task number -> 1 + offset of its block (0: none yet)."""
        self._dense_limit = 4 * len(plan) + 1024 if plan is not None else 0
        self._slots = array("q")
        self._complete = 0
        self._failed_attempts = 0
        #: rollouts per class (``_class_of``), kept as statuses change so a snapshot is O(1)
        self._classes = [0] * _CLASSES
        self._expected = sum(plan.values()) if plan is not None else None

    @property
    def plan(self) -> dict[str, int] | None:
        return self._plan

    def to_snapshot(self) -> dict[str, Any]:
        """Plain values for a snapshot (see :mod:`sidecar.state.snapshot`)."""
        return {
            "plan": self._plan,
            "max_attempts": self._max_attempts,
            "status": [[task, rollout, status] for (task, rollout), status in self._status.items()],
            "blocks": self._blocks,
            "dense_blocks": self._dense_blocks.tobytes(),
            "slots": self._slots.tobytes(),
            "complete": self._complete,
            "failed_attempts": self._failed_attempts,
            "classes": self._classes,
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> Accounting:
        accounting = cls(data["plan"], data["max_attempts"])
        accounting._status = {(task, rollout): status for task, rollout, status in data["status"]}
        accounting._blocks = dict(data["blocks"])
        accounting._dense_blocks = array("q", data["dense_blocks"])
        accounting._slots = array("q", data["slots"])
        accounting._complete = data["complete"]
        accounting._failed_attempts = data["failed_attempts"]
        accounting._classes = list(data["classes"])
        if len(accounting._classes) != _CLASSES:
            raise ValueError(f"accounting snapshot: {len(accounting._classes)} classes, expected {_CLASSES}")
        return accounting

    def _locate(self, key: RolloutKey, *, create: bool) -> tuple[int, int]:
        """``(block, slot)``: the task's block offset (-1: unplanned, or none and not ``create``) and
        the rollout's slot (-1: in the dict; ``_NOT_HEARD``: its task has no block yet)."""
        if self._plan is None:
            return -1, -1
        task, rollout = key
        name = str(task)
        repeats = self._plan.get(name)
        if repeats is None or not isinstance(rollout, int) or not 0 <= rollout < repeats:
            return -1, -1
        # ``type(task) is int`` makes ``name`` an int key, so a flat rollout's block has slots;
        # a ``str`` task spelled like one ("3") shares the block's state but keeps a dict entry.
        flat = type(task) is int and type(rollout) is int and repeats <= _FLAT_MAX
        number = task if type(task) is int else int(name) if _is_int_key(name) else -1
        dense = 0 <= number < self._dense_limit
        if dense:
            blocks = self._dense_blocks
            block = blocks[number] - 1 if number < len(blocks) else -1
        else:
            block = self._blocks.get(name, -1)
        if block < 0:
            if not create:
                return -1, _NOT_HEARD if flat else -1
            block = len(self._slots)
            if dense:
                if number >= len(blocks):
                    blocks.frombytes(bytes(8 * (number + 1 - len(blocks))))
                blocks[number] = block + 1
            else:
                self._blocks[name] = block
            sized = repeats <= _FLAT_MAX and _is_int_key(name)
            self._slots.frombytes(bytes(8 * (1 + (repeats if sized else 0))))
        return block, block + 1 + rollout if flat else -1

    def _update(self, key: RolloutKey, bits: int, attempts: int = 0) -> int | str | None:
        """Set bits; return the task index if this completed a planned task that has a success
        (only those have rows, hence digests, to close)."""
        return self._transition(key, bits, attempts)[1]

    def _transition(self, key: RolloutKey, bits: int, attempts: int = 0) -> tuple[int, int | str | None]:
        """:meth:`_update`, also returning the rollout's status before it."""
        block, slot = self._locate(key, create=True)
        slots = self._slots
        old = slots[slot] if slot >= 0 else self._status.get(key, 0)
        new = (old | bits) + (attempts << _ATTEMPT_SHIFT)
        attempts_now = new >> _ATTEMPT_SHIFT
        if not old & _RESOLVED and (
            new & (_SUCCEEDED | _TERMINAL) or (new & _FAILED and attempts_now >= self._max_attempts)
        ):
            new |= _RESOLVED
        if slot >= 0:
            slots[slot] = new
        else:
            self._status[key] = new
        planned = block >= 0
        classes = self._classes
        if old:
            classes[self._class_of(old, planned)] -= 1
        classes[self._class_of(new, planned)] += 1
        if not planned:
            return old, None
        return old, self._update_task(key[0], block, old, new)

    def _update_task(self, task: int | str, block: int, old: int, new: int) -> int | str | None:
        """Fold a planned rollout's status change into its task's state slot."""
        slots = self._slots
        state = slots[block]
        if new & _SUCCEEDED:
            state |= _TASK_WITH_SUCCESS
        completed = False
        if new & _RESOLVED and not old & _RESOLVED:
            state += 1 << _TASK_RESOLVED_SHIFT
            assert self._plan is not None
            if state >> _TASK_RESOLVED_SHIFT >= self._plan[str(task)] and not state & _TASK_COMPLETE:
                state |= _TASK_COMPLETE
                self._complete += 1
                completed = True
        slots[block] = state
        return task if completed and state & _TASK_WITH_SUCCESS else None

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

    def succeeded_again(self, key: RolloutKey) -> tuple[bool, int | str | None]:
        """:meth:`succeeded`, also telling whether ``key`` had succeeded before (what
        :meth:`has_succeeded` said just before), in one look-up of the rollout instead of two."""
        old, task = self._transition(key, _SUCCEEDED)
        return bool(old & _SUCCEEDED), task

    def failed(self, key: RolloutKey, *, terminal: bool) -> int | str | None:
        self._failed_attempts += 1
        return self._update(key, _FAILED | (_TERMINAL if terminal else 0), attempts=1)

    def drained(self, key: RolloutKey) -> int | str | None:
        return self._update(key, _DRAINED)

    def has_succeeded(self, key: RolloutKey) -> bool:
        _, slot = self._locate(key, create=False)
        if slot == _NOT_HEARD:
            return False
        status = self._slots[slot] if slot >= 0 else self._status.get(key, 0)
        return bool(status & _SUCCEEDED)

    def _flat_statuses(self) -> Iterator[tuple[str, int]]:
        """``(plan key, status)`` of every rollout heard of that has a slot, block by block."""
        plan = self._plan or {}
        slots = self._slots
        dense = ((str(number), offset - 1) for number, offset in enumerate(self._dense_blocks) if offset)
        for name, block in chain(dense, self._blocks.items()):
            repeats = plan[name]
            if repeats <= _FLAT_MAX and _is_int_key(name):
                for status in slots[block + 1 : block + 1 + repeats]:
                    if status:
                        yield name, status

    def succeeded_tasks(self) -> list[int | str]:
        """Every task with at least one success (O(rollouts); for run end): those with dict
        entries in first-seen order, then those with slots in the order their blocks were made."""
        seen: dict[int | str, None] = {}
        for (task, _), status in self._status.items():
            if status & _SUCCEEDED:
                seen[task] = None
        for name, status in self._flat_statuses():
            if status & _SUCCEEDED:
                seen[int(name)] = None
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
            tasks_complete=self._complete,
        )


def _is_int_key(name: str) -> bool:
    """True if a plan key is ``str`` of an ``int`` task index (only those tasks get slots)."""
    return name == str(int(name)) if name.lstrip("-").isdigit() else False
