"""Run-level ``perf_summary`` over many per-rollout ``ng_perf`` objects.

The summary needs medians and percentiles, so a partial state keeps every reported value (a
handful of numbers per rollout, in input order). Partial states from shards or several sidecars
merge by concatenation, in shard order, and give exactly the summary one pass over all rows would.
Each column is a typed array (8 bytes a value, no number object) while its values are all
``int`` or all ``float``, and a list once they mix, so every value reads back as it came in.

Every statistic is finite. Each is computed as the reference computes it; where that raises
(a float sum or mean past the double range, an ``int`` too large for a float) or comes out
infinite, the same statistic is computed exactly over rationals instead and rounded to the
nearest double, saturating at +/-``sys.float_info.max``. Totals of ``int`` values stay exact
``int`` (past 64 bits they are written as plain JSON digits).

Reads go through a cut (:meth:`PerfSummaryState.cut`, O(fields)): the live page takes one while
ingest pauses and computes from it on a thread while rows keep arriving; ``result()`` is a cut
read at once, so both give the same bytes over the same rows.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from sidecar.perf._column import Column, ColumnCut, Number, Ranked
from sidecar.perf._summation import builtin_sum

__all__ = ["PerfSummaryCut", "PerfSummaryState", "compute_perf_summary"]

_TOKEN_FIELDS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")
_PERCENTILES = ((0.5, "total_latency_p50_ms"), (0.9, "total_latency_p90_ms"), (0.99, "total_latency_p99_ms"))
_QUANTILES = tuple(q for q, _ in _PERCENTILES)

#: Snapshots written before the column had its own module name it by this path.
_Column = Column


#: The reference's number test, ``isinstance(value, _NUMBER)``: ``int`` or ``float`` (so ``bool``
#: passes too).
_NUMBER = (int, float)


def _fill(column: Column, values: list[Any]) -> None:
    for value in values:
        column.append(value)


class PerfSummaryState:
    """Mergeable partial state of ``compute_perf_summary``: ``add`` rows, ``merge`` shards, ``result``."""

    __slots__ = ("_latency", "_num_turns", "_records", "_token_covered", "_tokens", "_tokens_per_turn")

    def __init__(self) -> None:
        self._records = 0
        self._token_covered = 0
        self._tokens: dict[str, Column] = {field: Column() for field in _TOKEN_FIELDS}
        self._num_turns = Column()
        self._tokens_per_turn = Column()
        self._latency = Column()

    @property
    def records(self) -> int:
        """How many ``ng_perf`` objects were added."""
        return self._records

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "records": self._records,
            "token_covered": self._token_covered,
            "tokens": {field: column.tolist() for field, column in self._tokens.items()},
            "num_turns": self._num_turns.tolist(),
            "tokens_per_turn": self._tokens_per_turn.tolist(),
            "latency": self._latency.tolist(),
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> PerfSummaryState:
        state = cls()
        state._records, state._token_covered = int(data["records"]), int(data["token_covered"])
        for field in _TOKEN_FIELDS:
            _fill(state._tokens[field], data["tokens"][field])
        _fill(state._num_turns, data["num_turns"])
        _fill(state._tokens_per_turn, data["tokens_per_turn"])
        _fill(state._latency, data["latency"])
        return state

    def add(self, ng_perf: Mapping[str, Any]) -> None:
        """Fold in one rollout's ``ng_perf`` object; fields that are not numbers are skipped."""
        if not isinstance(ng_perf, Mapping):
            raise TypeError(f"ng_perf must be a JSON object, got {type(ng_perf).__name__}: {ng_perf!r}")
        self._records += 1
        get = ng_perf.get
        coverage = get("token_observability_coverage")
        if isinstance(coverage, _NUMBER) and coverage > 0:
            self._token_covered += 1
        tokens = self._tokens
        for field in _TOKEN_FIELDS:
            value = get(field)
            if isinstance(value, _NUMBER):
                tokens[field].append(value)
        turns = get("num_turns")
        if isinstance(turns, _NUMBER):
            self._num_turns.append(turns)
            completion = get("completion_tokens")
            if isinstance(completion, _NUMBER) and turns > 0:
                self._tokens_per_turn.append(_ratio(completion, turns))
        latency = get("total_latency_ms")
        if isinstance(latency, _NUMBER):
            self._latency.append(latency)

    def merge(self, other: PerfSummaryState) -> None:
        """Append ``other``'s rows after this state's rows (``other`` is left unchanged)."""
        self._records += other._records
        self._token_covered += other._token_covered
        for field in _TOKEN_FIELDS:
            self._tokens[field].extend(other._tokens[field])
        self._num_turns.extend(other._num_turns)
        self._tokens_per_turn.extend(other._tokens_per_turn)
        self._latency.extend(other._latency)

    def result(self, total_rollouts: int) -> dict[str, Any] | None:
        """The ``perf_summary`` object, or ``None`` without rollouts or without any ``ng_perf``.

        ``total_rollouts`` counts every row sent to aggregation, including rows without
        ``ng_perf``; both coverages are fractions of it. Nothing may be added meanwhile.
        """
        return PerfSummaryCut(self, frozen=True).result(total_rollouts)

    def cut(self) -> PerfSummaryCut:
        """The rows added so far, readable later while more are added (O(fields) to take).

        Take it where no row is being added (under the ingest pause); its :meth:`~PerfSummaryCut.result`
        may then run on another thread while rows keep coming, and equals :meth:`result` as of now.
        """
        return PerfSummaryCut(self, frozen=False)


class PerfSummaryCut:
    """The rows of a :class:`PerfSummaryState` at one instant: its counters and each column's cut."""

    __slots__ = ("_latency", "_num_turns", "_records", "_token_covered", "_tokens", "_tokens_per_turn")

    def __init__(self, state: PerfSummaryState, *, frozen: bool) -> None:
        self._records = state._records
        self._token_covered = state._token_covered
        self._tokens = {field: column.cut(frozen=frozen) for field, column in state._tokens.items()}
        self._num_turns = state._num_turns.cut(frozen=frozen)
        self._tokens_per_turn = state._tokens_per_turn.cut(frozen=frozen)
        self._latency = state._latency.cut(frozen=frozen)

    @property
    def records(self) -> int:
        """How many ``ng_perf`` objects the cut holds."""
        return self._records

    def result(self, total_rollouts: int) -> dict[str, Any] | None:
        """:meth:`PerfSummaryState.result` over the rows of the cut (each column read once)."""
        if total_rollouts <= 0 or not self._records:
            return None
        summary: dict[str, Any] = {
            "overall_observability_coverage": self._records / total_rollouts,
            "token_observability_coverage": self._token_covered / total_rollouts,
        }
        for field in _TOKEN_FIELDS:
            column = self._tokens[field]
            if column.count:
                values = column.values()
                summary[f"mean_{field}"] = _mean(values)
                summary[f"median_{field}"] = _median(column, values)
                summary[f"total_{field}"] = _total(values)
        turns = self._num_turns
        if turns.count:
            values = turns.values()
            summary["mean_num_turns"] = _mean(values)
            summary["median_num_turns"] = _median(turns, values)
            summary["std_num_turns"] = _finite(
                lambda: statistics.pstdev(values), lambda: _exact_pstdev(_as_list(values))
            )
            summary["min_num_turns"] = turns.minimum(values)
            summary["p90_num_turns"] = _percentile(turns, values, 0.9)
            summary["max_num_turns"] = turns.maximum(values)
        ratios = self._tokens_per_turn
        if ratios.count:
            values = ratios.values()
            summary["mean_tokens_per_turn"] = _mean(values)
            summary["median_tokens_per_turn"] = _median(ratios, values)
        latency = self._latency
        if latency.count:
            values = latency.values()
            for q, key in _PERCENTILES:
                summary[key] = _percentile(latency, values, q)
            summary["total_latency_mean_ms"] = _mean(values)
        return summary


def compute_perf_summary(records: Iterable[Mapping[str, Any]], total_rollouts: int) -> dict[str, Any] | None:
    """The run-level ``perf_summary`` of ``records`` (the rows' ``ng_perf`` objects) in one pass."""
    state = PerfSummaryState()
    for record in records:
        state.add(record)
    return state.result(total_rollouts)


def _saturate(value: Fraction) -> float:
    """The double nearest ``value``, or +/-``sys.float_info.max`` past the double range."""
    try:
        return float(value)
    except OverflowError:
        return sys.float_info.max if value > 0 else -sys.float_info.max


def _finite(reference: Callable[[], Number], exact: Callable[[], Fraction]) -> Number:
    """``reference()`` when it completes with an ``int`` or a finite float, else ``exact()`` saturated."""
    try:
        value = reference()
    except (OverflowError, ValueError):  # statistics/fsum past the double range, inf - inf
        value = math.inf
    if type(value) is int or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, bool):
        return value
    return _saturate(exact())


def _exact_sum(values: list[Number]) -> Fraction:
    return sum((Fraction(value) for value in values), Fraction(0))


def _exact_median(values: list[Number]) -> Fraction:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return Fraction(ordered[middle])
    return (Fraction(ordered[middle - 1]) + Fraction(ordered[middle])) / 2


def _exact_pstdev(values: list[Number]) -> Fraction:
    """Population standard deviation over rationals (the square root taken on a scaled double)."""
    mean = _exact_sum(values) / len(values)
    variance = sum(((Fraction(value) - mean) ** 2 for value in values), Fraction(0)) / len(values)
    shift = max(0, (variance.numerator.bit_length() - variance.denominator.bit_length()) // 2 - 500)
    root = math.sqrt(float(variance / 4**shift))
    return Fraction(root) * Fraction(2**shift)


def _as_list(values: Sequence[Number]) -> list[Number]:
    return list(values)


def _mean(values: Sequence[Number]) -> float:
    exact = lambda: _exact_sum(_as_list(values)) / len(values)  # noqa: E731
    return float(_finite(lambda: statistics.fmean(values), exact))


def _median(column: ColumnCut, values: Sequence[Number]) -> Number:
    """``statistics.median``: the middle value, or the mean of the two middle values."""
    ordered = column.ordered(values, _QUANTILES)
    n = len(ordered)
    middle = n // 2
    reference: Callable[[], Number]
    if n % 2:
        reference = lambda: ordered[middle]  # noqa: E731
    else:
        reference = lambda: (ordered[middle - 1] + ordered[middle]) / 2  # noqa: E731
    return _finite(reference, lambda: _exact_median(_as_list(values)))


def _total(values: Sequence[Number]) -> Number:
    return _finite(lambda: builtin_sum(values), lambda: _exact_sum(_as_list(values)))


def _ratio(numerator: Number, denominator: Number) -> float:
    """``numerator / denominator`` as the reference divides, saturated where that overflows."""
    try:
        quotient = numerator / denominator
    except OverflowError:  # an int quotient past the double range
        quotient = math.inf
    if math.isfinite(quotient):
        return quotient  # a true division of numbers is a float
    exact = lambda: Fraction(numerator) / Fraction(denominator)  # noqa: E731
    return float(_finite(lambda: numerator / denominator, exact))


def _percentile(column: ColumnCut, values: Sequence[Number], q: float) -> float:
    ordered = column.ordered(values, _QUANTILES)
    integral = column.integral
    return float(
        _finite(lambda: _reference_percentile(ordered, q, integral), lambda: _exact_percentile(ordered, q))
    )


def _exact_percentile(ordered: Ranked, q: float) -> Fraction:
    n = len(ordered)
    position = (n - 1) * q
    below = int(position)
    if below >= n - 1:
        return Fraction(ordered[-1])
    low, high = Fraction(ordered[below]), Fraction(ordered[below + 1])
    return low + (high - low) * Fraction(position - below)


def _reference_percentile(ordered: Ranked, q: float, integral: bool) -> float:
    """numpy's ``method="linear"`` percentile of ascending ``ordered``, evaluation order included.

    Position ``(n - 1) * q``; between neighbours ``a`` and ``b`` at fraction ``t`` the value is
    ``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` once ``t >= 0.5``. numpy works on one
    dtype: all-integer input (``integral``) subtracts as integers, anything else as floats.
    """
    n = len(ordered)
    position = (n - 1) * q
    below = int(position)
    if below >= n - 1:
        return float(ordered[-1])
    low: Number = ordered[below]
    high: Number = ordered[below + 1]
    if not integral:
        low, high = float(low), float(high)
    fraction = position - below
    diff = high - low
    if fraction >= 0.5:
        return float(high - diff * (1 - fraction))
    return float(low + diff * fraction)
