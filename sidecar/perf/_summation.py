"""Python 3.12+ ``sum()`` arithmetic, reproduced on any interpreter.

The reference ran on CPython 3.13, whose built-in ``sum`` adds floats with Neumaier
compensation; CPython 3.11 adds them naively. Report numbers derived from a sum (task-hours,
token totals) must not depend on which interpreter runs the sidecar, so both the tracker and
the perf summary add through :func:`builtin_sum`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence

__all__ = ["builtin_sum", "emulated_sum", "format_positive_sum"]


def emulated_sum(values: Iterable[float]) -> float:
    """Return exactly what CPython 3.12/3.13 ``sum(values)`` returns for ints and floats.


    Integers accumulate exactly until the first float; from then on floats are added with
    Neumaier compensation and later integers are added as plain doubles (without
    compensation), as CPython does. The compensation is applied once, at the end, only when it
    is non-zero and finite. An all-integer input returns an ``int``.
    """
    iterator = iter(values)
    int_total = 0
    for value in iterator:
        if type(value) is int or type(value) is bool:
            int_total += value
            continue
        if not isinstance(value, float):
            raise TypeError(f"emulated_sum: unsupported value {value!r} of type {type(value).__name__}")
        total = int_total + value
        break
    else:
        return int_total
    compensation = 0.0
    for value in iterator:
        if type(value) is float:
            step = total + value
            if abs(total) >= abs(value):
                compensation += (total - step) + value
            else:
                compensation += (value - step) + total
            total = step
        elif isinstance(value, int | float):
            total += float(value)
        else:
            raise TypeError(f"emulated_sum: unsupported value {value!r} of type {type(value).__name__}")
    if compensation and math.isfinite(compensation):
        total += compensation
    return total


builtin_sum: Callable[[Iterable[float]], float] = sum if sys.version_info >= (3, 12) else emulated_sum
"""CPython 3.12+ ``sum``: the built-in itself where it has those semantics, else :func:`emulated_sum`."""


_FSUM_CHUNK = 8192


def _chunked_fsum(values: Sequence[float]) -> float:
    """``math.fsum`` of chunks, summed by ``math.fsum``: within ``len(values) / 8192`` half-ulps of
    the exact sum (far inside the 1e-12 band below), and no single C call over a whole column
    holds the interpreter lock for milliseconds."""
    if len(values) <= _FSUM_CHUNK:
        return math.fsum(values)
    starts = range(0, len(values), _FSUM_CHUNK)
    return math.fsum(math.fsum(values[start : start + _FSUM_CHUNK]) for start in starts)


def format_positive_sum(values: Sequence[float], divisor: float, spec: str) -> str:
    """``format(builtin_sum(values) / divisor, spec)`` for values that are all ``> 0``, fast.

    For positive values the compensated sum lies within a few ulps of the exact sum, which
    ``math.fsum`` returns correctly rounded (in C), and division and fixed-point formatting are
    monotone. So when a band of relative width 1e-12 around the ``fsum`` formats to a single
    string, that string is the answer; only a value on a rounding boundary (or an infinite sum)
    pays for the Python-level compensated loop. (The ``fsum`` is taken in chunks; it only needs
    to lie within a few ulps of the exact sum.)
    """
    if builtin_sum is not emulated_sum:
        return format(builtin_sum(values) / divisor, spec)
    try:
        exact = _chunked_fsum(values)
    except (OverflowError, ValueError):
        exact = math.inf
    if math.isfinite(exact):
        low = format(exact * (1 - 1e-12) / divisor, spec)
        if low == format(exact * (1 + 1e-12) / divisor, spec):
            return low
    return format(emulated_sum(values) / divisor, spec)
