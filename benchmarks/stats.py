"""The figures the benchmarks quote of a sample, computed one way everywhere."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["quantile"]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the value at rank ``floor(q * n)`` of the sorted
    sample, so ``q=0.99`` of 100 values is the largest, never an interpolation."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
