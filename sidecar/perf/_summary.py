"""Run-level ``perf_summary`` over the rollouts' ``ng_perf`` objects, kept as rows arrive.

Each field's values are held sorted and summed exactly, so a read is a few index lookups and
small exact sums per field at any run size (the page reads it under the ingest pause). Each
statistic is the reference's; where that raises or is infinite (past the double range) it is
taken exactly over rationals and saturates at +/-``sys.float_info.max``. ``int`` totals stay
exact. A value that is not a finite number (NaN, an infinity) counts as not reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, TypeGuard

from sidecar.perf._values import Number, SortedValues, decode, encode, mapping, saturate, sqrt

__all__ = ["PerfSummaryState", "compute_perf_summary"]

_TOKEN_FIELDS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens")
_FIELDS = (*_TOKEN_FIELDS, "num_turns", "tokens_per_turn", "total_latency_ms")
_KEYS = ["fields", "records", "token_covered", "totals"]
_PERCENTILES = ((0.5, "total_latency_p50_ms"), (0.9, "total_latency_p90_ms"), (0.99, "total_latency_p99_ms"))


def _number(value: object) -> TypeGuard[Number]:
    """The reference's number test (``int`` or ``float``, so ``bool`` too), finite."""
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


class PerfSummaryState:
    """``compute_perf_summary`` kept incrementally: ``add`` rows, read ``result`` at any time."""

    __slots__ = ("_fields", "_records", "_token_covered", "_totals")

    def __init__(self) -> None:
        self._records = 0
        self._token_covered = 0
        self._fields = {name: SortedValues() for name in _FIELDS}
        self._totals = {name: _BuiltinSum() for name in _TOKEN_FIELDS}

    def add(self, ng_perf: Mapping[str, Any]) -> None:
        """Fold in one rollout's ``ng_perf`` object; fields that are not numbers are skipped."""
        if not isinstance(ng_perf, Mapping):
            raise TypeError(f"ng_perf must be a JSON object, got {type(ng_perf).__name__}: {ng_perf!r:.200}")
        self._records += 1
        get, fields = ng_perf.get, self._fields
        coverage = get("token_observability_coverage")
        if isinstance(coverage, int | float) and coverage > 0:
            self._token_covered += 1
        for name in _TOKEN_FIELDS:
            if _number(value := get(name)):
                fields[name].add(value)
                self._totals[name].add(value)
        if _number(latency := get("total_latency_ms")):
            fields["total_latency_ms"].add(latency)
        turns = get("num_turns")
        if _number(turns):
            fields["num_turns"].add(turns)
            completion = get("completion_tokens")
            if _number(completion) and turns > 0:
                fields["tokens_per_turn"].add(_ratio(completion, turns))

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
                total = self._totals[name].result()
                finite = type(total) is int or math.isfinite(total)
                summary[f"total_{name}"] = total if finite else saturate(values.total())
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
            "totals": {name: total.to_snapshot() for name, total in self._totals.items()},
        }

    @classmethod
    def from_snapshot(cls, data: Any) -> PerfSummaryState:
        """The state :meth:`to_snapshot` described; ``ValueError`` naming the part at fault for
        any other shape, and nothing else is built."""
        data = mapping(data, _KEYS, "a perf summary snapshot")
        records, covered = data["records"], data["token_covered"]
        fields = mapping(data["fields"], _FIELDS, "perf summary fields")
        totals = mapping(data["totals"], _TOKEN_FIELDS, "perf summary totals")
        if type(records) is not int or records < 0:
            raise ValueError(f"perf summary records must be an int >= 0, got {records!r:.80}")
        if type(covered) is not int or not 0 <= covered <= records:
            raise ValueError(
                f"perf summary token_covered must be an int in [0, {records}], not {covered!r:.80}"
            )
        state = cls()
        state._records, state._token_covered = records, covered
        state._totals = {name: _BuiltinSum.from_snapshot(totals[name], name) for name in _TOKEN_FIELDS}
        for name in _FIELDS:
            values = state._fields[name] = SortedValues.from_snapshot(fields[name], f"perf summary {name}")
            if len(values) > records:
                raise ValueError(f"perf summary {name} holds {len(values)} values of {records} records")
            if values and not -math.inf < values.ordered[0] <= values.ordered[-1] < math.inf:
                raise ValueError(f"perf summary {name} holds a value that is not finite")
        return state


class _BuiltinSum:
    """CPython 3.12+'s ``sum()`` in arrival order (the reference's ``total_*``): ints exactly until
    the first float, then floats with Neumaier's compensation and ints as plain doubles."""

    __slots__ = ("compensation", "exact", "total")

    def __init__(self, exact: int | None = 0, total: float = 0.0, compensation: float = 0.0) -> None:
        self.exact, self.total, self.compensation = exact, total, compensation

    def add(self, value: Number) -> None:
        exact = self.exact
        try:
            if exact is not None and not isinstance(value, float):
                self.exact = exact + value
            elif exact is not None:
                self.exact, self.total = None, exact + value
            elif isinstance(value, float):
                step = self.total + value
                big, small = (self.total, value) if abs(self.total) >= abs(value) else (value, self.total)
                self.total, self.compensation = step, self.compensation + ((big - step) + small)
            else:
                self.total += value
        except OverflowError:  # an int past the double range: not finite, so the exact sum is read
            self.exact, self.total = None, math.inf

    def result(self) -> Number:
        if self.exact is not None:
            return self.exact
        compensation = self.compensation
        return self.total + compensation if compensation and math.isfinite(compensation) else self.total

    def to_snapshot(self) -> list[Any]:
        return [None if self.exact is None else encode(self.exact), self.total, self.compensation]

    @classmethod
    def from_snapshot(cls, data: Any, name: str) -> _BuiltinSum:
        if isinstance(data, list) and len(data) == 3 and all(type(part) is float for part in data[1:]):
            exact = None if data[0] is None else decode(data[0])
            if data[0] is None or type(exact) is int:
                return cls(exact, data[1], data[2])  # type: ignore[arg-type]
        raise ValueError(f"perf summary totals[{name!r}] is [int or null, float, float], not {data!r:.80}")


def compute_perf_summary(records: Iterable[Mapping[str, Any]], total_rollouts: int) -> dict[str, Any] | None:
    """The run-level ``perf_summary`` of ``records`` (the rows' ``ng_perf`` objects) in one pass."""
    state = PerfSummaryState()
    for record in records:
        state.add(record)
    return state.result(total_rollouts)


def _finite(compute: Callable[[], Number], exact: Callable[[], Fraction]) -> Number:
    """``compute()`` as the reference evaluates it; where that overflows or is not finite, the
    ``exact`` value saturated to the double range."""
    try:
        value = compute()
    except OverflowError:  # an int past the double range
        value = math.inf
    return value if math.isfinite(value) else saturate(exact())


def _mean(values: SortedValues) -> float:
    """``statistics.fmean``: the correctly rounded sum (``math.fsum``'s), divided by the count."""
    total, n = values.total(), len(values)
    return float(_finite(lambda: float(total) / n, lambda: total / n))


def _median(values: SortedValues) -> Number:
    """``statistics.median``: the middle value, or the mean of the two middle values."""
    ordered = values.ordered
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]  # type: ignore[no-any-return]
    low, high = ordered[middle - 1], ordered[middle]
    return _finite(lambda: (low + high) / 2, lambda: (Fraction(low) + Fraction(high)) / 2)


def _pstdev(values: SortedValues) -> float:
    """``statistics.pstdev``: from the exact sums of the values and of their squares."""
    n, total = len(values), values.total()
    return sqrt((n * values.total(2) - total * total) / (n * n))


def _ratio(numerator: Number, denominator: Number) -> float:
    """``numerator / denominator`` as the reference divides, saturated where that overflows."""
    quotient = _finite(lambda: numerator / denominator, lambda: Fraction(numerator) / Fraction(denominator))
    return float(quotient)


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

    def fast() -> float:
        if below == last:
            return float(low)
        a, b = (low, high) if values.integral else (float(low), float(high))
        diff = b - a
        return float(b - diff * (1 - fraction) if fraction >= 0.5 else a + diff * fraction)

    return float(_finite(fast, lambda: Fraction(low) + (Fraction(high) - Fraction(low)) * Fraction(fraction)))
