"""One column of the perf summary: an append-only sequence of numbers, its ordered view, its cuts.

A *cut* (:class:`ColumnCut`) names the column's first ``n`` values and the facts kept about them
(type, NaN, minimum, maximum) at one instant: O(1) to take. Values are only ever appended, so a
cut taken while ingest is paused reads the same values later, on another thread, while ingest
appends more: the live page's perf summary is computed from a cut without holding ingest.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from sortedcontainers import SortedList

__all__ = ["BULK_FRACTION", "Column", "ColumnCut", "Number", "Ranked", "sorted_in_steps"]

Number = int | float  # bool is an int, and passes the reference's number test too

_INT64 = range(-(2**63), 2**63)

#: The ordered view is rebuilt whole (sorted in steps) when at least this fraction of its values
#: is new, and brought up to date one insertion at a time below it.
BULK_FRACTION = 0.25
#: Values sorted by one call when rebuilding: each C sort holds the interpreter lock (the event
#: loop's thread waits) for its whole length, so no call sorts a whole column of a big run.
_SORT_STEP = 1 << 15


class Ranked(Protocol):
    """What order statistics read of ascending values: their count and a value by rank."""

    def __len__(self) -> int: ...
    def __getitem__(self, rank: int, /) -> Number: ...


class Column:
    """An append-only sequence of numbers that reads back with every value's type and value intact.

    ``array("q")`` while every value is a plain ``int`` in 64 bits, ``array("d")`` while every
    value is a ``float``; a list from the first value that breaks the pattern (``bool``, a mix).
    The minimum and maximum are kept as values arrive. Order statistics read an ordered copy
    (a ``SortedList``) brought up to date on read: rebuilt when many values are new (a cold
    start: :func:`sorted_in_steps`), else with only the values that arrived since, one insertion
    at a time. Equal
    values keep their arrival order, as a stable sort keeps them; a column holding a NaN has no
    total order and is sorted whole. One lock per column serializes the builders that update
    the ordered copy (the page's, built outside the ingest pause, and a report's).
    """

    __slots__ = ("_integral", "_max", "_min", "_nan", "_order_lock", "_ordered", "_values")

    def __init__(self) -> None:
        self._values: array[Any] | list[Number] = []
        self._integral = True  # every value is an ``int`` (``bool`` included)
        self._nan = False
        self._min: Number | None = None
        self._max: Number | None = None
        self._ordered: SortedList | None = None
        self._order_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Number]:
        return iter(self._values)

    def append(self, value: Number) -> None:
        kind = type(value)
        if kind is not int and kind is not bool:
            self._integral = False
            if value != value:
                self._nan = True
        low = self._min
        if low is None or value < low:
            self._min = value
        high = self._max
        if high is None or value > high:
            self._max = value
        values = self._values
        if type(values) is array:
            if (kind is float and values.typecode == "d") or (
                kind is int and values.typecode == "q" and value in _INT64
            ):
                values.append(value)
                return
            self._values = values = values.tolist()
        elif not values:  # nothing yet (a list that was an array is never empty)
            if kind is float:
                self._values = array("d", (value,))
                return
            if kind is int and value in _INT64:
                self._values = array("q", (value,))
                return
        values.append(value)

    def extend(self, other: Column) -> None:
        for value in other.tolist():  # a snapshot: ``other`` may be this column
            self.append(value)

    def tolist(self) -> list[Number]:
        values = self._values
        return values.tolist() if isinstance(values, array) else list(values)

    def cut(self, *, frozen: bool = False) -> ColumnCut:
        """The column as it is now. ``frozen``: the caller guarantees nothing is appended until
        the cut is read (a report built under the ingest pause), so its values are not copied."""
        return ColumnCut(self, frozen)

    def _ordered_at(self, values: Sequence[Number], count: int, ranks: Sequence[int]) -> list[Number] | None:
        """The values of ranks ``ranks`` among ``values[:count]`` in ascending order (a stable
        sort's order), read under the column's lock; ``None`` when the ordered copy already holds
        more than ``count`` values (another builder read a later cut)."""
        with self._order_lock:
            ordered = self._ordered
            held = 0 if ordered is None else len(ordered)
            if held > count:
                return None
            if ordered is None or count - held >= BULK_FRACTION * held:
                ordered = self._ordered = _sorted_list(sorted_in_steps(values, count))
            else:
                add = ordered.add  # bisect right: a value lands after the equal ones held
                for index in range(held, count):
                    add(values[index])
            return [ordered[rank] for rank in ranks]


def sorted_in_steps(values: Sequence[Number], count: int) -> list[Number]:
    """``sorted(values[:count])``, in C calls that each hold the interpreter lock briefly.

    Runs of :data:`_SORT_STEP` values are sorted, then neighbours merged pairwise (a sort of two
    ascending runs is one linear merge: the last spans the column, ~30 ms at 1M values, against
    ~250 ms for one whole sort) until one is left. Timsort is stable and the earlier run
    comes first, so equal values keep arrival order: the result is ``sorted()``'s, ties of
    ``1``/``1.0``/``True`` and ``0.0``/``-0.0`` included. Not for values holding a NaN (no total
    order: only one whole ``sorted()`` gives the reference's order).
    """
    runs = [sorted(values[start : min(start + _SORT_STEP, count)]) for start in range(0, count, _SORT_STEP)]
    while len(runs) > 1:
        merged = []
        for index in range(0, len(runs) - 1, 2):
            pair = runs[index] + runs[index + 1]
            pair.sort()
            merged.append(pair)
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    return runs[0] if runs else []


def _sorted_list(ascending: list[Number]) -> SortedList:
    """A ``SortedList`` of values already ascending, laid out as its own constructor lays them out
    (``SortedList(ascending)`` would sort them once more, in one call over the whole list)."""
    ordered = SortedList()
    load = ordered._load
    ordered._lists = [ascending[start : start + load] for start in range(0, len(ascending), load)]
    ordered._maxes = [sublist[-1] for sublist in ordered._lists]
    ordered._len = len(ascending)
    return ordered


class _Picked:
    """A few ranks of ascending values (what order statistics read), by rank; ``-1`` is the last."""

    __slots__ = ("_count", "_values")

    def __init__(self, count: int, values: dict[int, Number]) -> None:
        self._count = count
        self._values = values

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, rank: int, /) -> Number:
        return self._values[rank + self._count if rank < 0 else rank]


def needed_ranks(count: int, quantiles: Sequence[float]) -> list[int]:
    """The ranks a median and the ``quantiles`` (numpy ``linear``) read among ``count`` values."""
    ranks = {count // 2, max(0, count // 2 - 1), count - 1}
    for q in quantiles:
        below = int((count - 1) * q)
        ranks.add(min(below, count - 1))
        ranks.add(min(below + 1, count - 1))
    return sorted(ranks)


class ColumnCut:
    """A column's first :attr:`count` values and what was known of them when the cut was taken."""

    __slots__ = ("_column", "_frozen", "_max", "_min", "_nan", "_values", "count", "integral")

    def __init__(self, column: Column, frozen: bool) -> None:
        self._column = column
        self._frozen = frozen
        # appended to in place, or replaced by a list: never changed below ``count``
        self._values = column._values
        self.count = len(self._values)
        self.integral = column._integral
        self._nan = column._nan
        self._min = column._min
        self._max = column._max

    def __len__(self) -> int:
        return self.count

    def values(self) -> Sequence[Number]:
        """The values in arrival order: the column's own when frozen, else a copy of the prefix
        (an array slice is one copy of 8 bytes a value; the caller drops it after the column)."""
        values = self._values
        return values if self._frozen else values[: self.count]

    def minimum(self, values: Sequence[Number]) -> Number:
        """``min()`` of the values (the first of equal minima); a column holding a NaN is scanned."""
        if self._nan or self._min is None:
            return min(values)
        return self._min

    def maximum(self, values: Sequence[Number]) -> Number:
        """``max()`` of the values (the first of equal maxima); a column holding a NaN is scanned."""
        if self._nan or self._max is None:
            return max(values)
        return self._max

    def ordered(self, values: Sequence[Number], quantiles: Sequence[float]) -> Ranked:
        """The values in ascending order, as far as a median and ``quantiles`` read them.

        ``values`` is :meth:`values`. A column holding a NaN is sorted whole, as is a cut older
        than the column's ordered copy (a report read a later cut in between: rare).
        """
        if self._nan:
            return sorted(values)
        ranks = needed_ranks(self.count, quantiles)
        picked = self._column._ordered_at(self._values, self.count, ranks)
        if picked is None:
            return sorted_in_steps(values, self.count)
        return _Picked(self.count, dict(zip(ranks, picked, strict=True)))
