"""Run-level ``perf_summary`` over the rollouts' ``ng_perf`` objects, kept as rows arrive.

Each field's values are held sorted and summed exactly, so a read is a few index lookups and
small exact sums per field at any run size (the page reads it under the ingest pause). Each
statistic is the reference's; where that raises or is infinite (past the double range) it is
taken exactly over rationals and saturates at +/-``sys.float_info.max``. ``int`` totals stay
exact. A value that is not a finite number (NaN, an infinity) counts as not reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, TypeGuard

from sidecar.perf._values import Number, SortedValues, keys_of, saturate, sqrt

__all__ = ["PerfSummaryState", "compute_perf_summary"]

_TOKEN_FIELDS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")
_FIELDS = (*_TOKEN_FIELDS, "num_turns", "tokens_per_turn", "total_latency_ms")
_KEYS = ["fields", "records", "token_covered"]
_PERCENTILES = ((0.5, "total_latency_p50_ms"), (0.9, "total_latency_p90_ms"), (0.99, "total_latency_p99_ms"))


def _number(value: object) -> TypeGuard[Number]:
    """The reference's number test (``int`` or ``float``, so ``bool`` too), finite."""
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


class PerfSummaryState:
    """``compute_perf_summary`` kept incrementally: ``add`` rows, ``merge`` shards, ``result``."""

    __slots__ = ("_fields", "_records", "_token_covered")

    def __init__(self) -> None:
        self._records = 0
        self._token_covered = 0
        self._fields = {name: SortedValues() for name in _FIELDS}

    @property
    def records(self) -> int:
        """How many ``ng_perf`` objects were added."""
        return self._records

    def add(self, ng_perf: Mapping[str, Any]) -> None:
        """Fold in one rollout's ``ng_perf`` object; fields that are not numbers are skipped."""
        if not isinstance(ng_perf, Mapping):
            raise TypeError(f"ng_perf must be a JSON object, got {type(ng_perf).__name__}: {ng_perf!r:.200}")
        self._records += 1
        get, fields = ng_perf.get, self._fields
        coverage = get("token_observability_coverage")
        if isinstance(coverage, int | float) and coverage > 0:
            self._token_covered += 1
        for name in (*_TOKEN_FIELDS, "total_latency_ms"):
            if _number(value := get(name)):
                fields[name].add(value)
        turns = get("num_turns")
        if _number(turns):
            fields["num_turns"].add(turns)
            completion = get("completion_tokens")
            if _number(completion) and turns > 0:
                fields["tokens_per_turn"].add(_ratio(completion, turns))

    def merge(self, other: PerfSummaryState) -> None:
        """Append ``other``'s rows after this state's rows (``other`` is left unchanged)."""
        self._records += other._records
        self._token_covered += other._token_covered
        for name, values in self._fields.items():
            for value in list(other._fields[name].ordered):  # a copy: ``other`` may be ``self``
                values.add(value)

    def result(self, total_rollouts: int) -> dict[str, Any] | None:
        """The ``perf_summary`` object, or ``None`` without rollouts or without any ``ng_perf``.

        ``total_rollouts`` counts every row sent to aggregation, including rows without
        ``ng_perf``; both coverages are fractions of it.
        """
        if total_rollouts <= 0 or not self._records:
            return None
        summary: dict[str, Any] = {
            "overall_observability_coverage": self._records / total_rollouts,
            "token_observability_coverage": self._token_covered / total_rollouts,
        }
        fields = self._fields
        for name in _TOKEN_FIELDS:
            values = fields[name]
            if values:
                summary[f"mean_{name}"] = _mean(values)
                summary[f"median_{name}"] = _median(values)
                summary[f"total_{name}"] = _total(values)
        turns = fields["num_turns"]
        if turns:
            ordered = turns.ordered
            summary["mean_num_turns"] = _mean(turns)
            summary["median_num_turns"] = _median(turns)
            summary["std_num_turns"] = _pstdev(turns)
            summary["min_num_turns"] = ordered[0]
            summary["p90_num_turns"] = _percentile(turns, 0.9)
            summary["max_num_turns"] = ordered[ordered.bisect_left(ordered[-1])]  # max(): the first of equals
        ratios = fields["tokens_per_turn"]
        if ratios:
            summary["mean_tokens_per_turn"] = _mean(ratios)
            summary["median_tokens_per_turn"] = _median(ratios)
        latency = fields["total_latency_ms"]
        if latency:
            for q, key in _PERCENTILES:
                summary[key] = _percentile(latency, q)
            summary["total_latency_mean_ms"] = _mean(latency)
        return summary

    def to_snapshot(self) -> dict[str, Any]:
        """The state as plain values (MessagePack-encodable): counters and each field's sorted values."""
        return {
            "records": self._records,
            "token_covered": self._token_covered,
            "fields": {name: values.to_snapshot() for name, values in self._fields.items()},
        }

    @classmethod
    def from_snapshot(cls, data: Any) -> PerfSummaryState:
        """The state :meth:`to_snapshot` described; ``ValueError`` naming the part at fault for
        any other shape, and nothing else is built."""
        if not isinstance(data, dict) or data.keys() != set(_KEYS):
            raise ValueError(f"a perf summary snapshot has the keys {_KEYS}, not {keys_of(data)}")
        records, covered, fields = data["records"], data["token_covered"], data["fields"]
        if type(records) is not int or records < 0:
            raise ValueError(f"perf summary records must be an int >= 0, got {records!r:.80}")
        if type(covered) is not int or not 0 <= covered <= records:
            raise ValueError(
                f"perf summary token_covered must be an int in [0, {records}], not {covered!r:.80}"
            )
        if not isinstance(fields, dict) or fields.keys() != set(_FIELDS):
            raise ValueError(f"perf summary fields are {sorted(_FIELDS)}, not {keys_of(fields)}")
        state = cls()
        state._records, state._token_covered = records, covered
        for name in _FIELDS:
            values = state._fields[name] = SortedValues.from_snapshot(fields[name], f"perf summary {name}")
            if len(values) > records:
                raise ValueError(f"perf summary {name} holds {len(values)} values of {records} records")
            if values and not -math.inf < values.ordered[0] <= values.ordered[-1] < math.inf:
                raise ValueError(f"perf summary {name} holds a value that is not finite")
        return state


def compute_perf_summary(records: Iterable[Mapping[str, Any]], total_rollouts: int) -> dict[str, Any] | None:
    """The run-level ``perf_summary`` of ``records`` (the rows' ``ng_perf`` objects) in one pass."""
    state = PerfSummaryState()
    for record in records:
        state.add(record)
    return state.result(total_rollouts)


def _mean(values: SortedValues) -> float:
    """``statistics.fmean``: the correctly rounded sum (``math.fsum``'s), divided by the count."""
    total = values.total()
    try:
        return float(total) / len(values)
    except OverflowError:
        return saturate(total / len(values))


def _median(values: SortedValues) -> Number:
    """``statistics.median``: the middle value, or the mean of the two middle values."""
    ordered = values.ordered
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]  # type: ignore[no-any-return]
    low, high = ordered[middle - 1], ordered[middle]
    try:
        median = (low + high) / 2
    except OverflowError:  # an int sum past the double range
        median = math.inf
    return median if math.isfinite(median) else saturate((Fraction(low) + Fraction(high)) / 2)


def _total(values: SortedValues) -> Number:
    """``sum``: an exact ``int`` for ``int`` values, else the exact sum correctly rounded."""
    total = values.total()
    return total.numerator if values.integral else saturate(total)


def _pstdev(values: SortedValues) -> float:
    """``statistics.pstdev``: from the exact sums of the values and of their squares."""
    n, total = len(values), values.total()
    return sqrt((n * values.total(2) - total * total) / (n * n))


def _ratio(numerator: Number, denominator: Number) -> float:
    """``numerator / denominator`` as the reference divides, saturated where that overflows."""
    try:
        quotient = numerator / denominator
    except OverflowError:  # an int quotient past the double range
        quotient = math.inf
    return quotient if math.isfinite(quotient) else saturate(Fraction(numerator) / Fraction(denominator))


def _percentile(values: SortedValues, q: float) -> float:
    """numpy's ``method="linear"`` percentile, evaluation order included.

    Position ``(n - 1) * q``; between neighbours ``a`` and ``b`` at fraction ``t`` the value is
    ``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` once ``t >= 0.5``. numpy works on one
    dtype: all-``int`` values subtract as integers, anything else as floats.
    """
    ordered = values.ordered
    last = len(ordered) - 1
    position = last * q
    below = min(int(position), last)
    low, high, fraction = ordered[below], ordered[min(below + 1, last)], position - below
    try:
        if below == last:
            value = float(low)
        else:
            a, b = (low, high) if values.integral else (float(low), float(high))
            diff = b - a
            value = float(b - diff * (1 - fraction) if fraction >= 0.5 else a + diff * fraction)
    except OverflowError:  # an int past the double range
        value = math.inf
    if math.isfinite(value):
        return value
    return saturate(Fraction(low) + (Fraction(high) - Fraction(low)) * Fraction(fraction))
