"""Numbers kept sorted and summed exactly, and their snapshot form: what the tracker and the perf
summary hold, so that every read is a few index lookups and one small exact sum."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from sortedcontainers import SortedList

__all__ = ["Number", "SortedValues", "decode", "encode", "mapping", "saturate", "sqrt"]

Number = int | float  # bool is an int, and passes the reference's number test too

_BIG_INT = re.compile(r"-?[1-9][0-9]*")  # an int past msgpack's 64 bits, written in a snapshot as digits


class SortedValues:
    """Numbers in ascending order, equal ones in arrival order (as a stable sort leaves them), as
    given (an ``int`` stays an ``int``), with the exact sum of the finite ones and of their squares.

    The sums are kept as ``statistics`` keeps them: numerators by denominator (1 for an ``int``, a
    power of two for a float), so adding is a dict update and reading a sum of a few dozen ints.
    """

    __slots__ = ("integral", "ordered", "squares", "sums")

    def __init__(self) -> None:
        self.ordered = SortedList()  # add() bisects right: an equal value lands after those held
        self.sums: dict[int, int] = {}
        self.squares: dict[int, int] = {}
        self.integral = True  # every value is an ``int`` (``bool`` included)

    def __len__(self) -> int:
        return len(self.ordered)

    def add(self, value: Number) -> None:
        self.ordered.add(value)
        if type(value) is float:
            self.integral = False
            if not math.isfinite(value):
                return
        numerator, denominator = value.as_integer_ratio()
        self.sums[denominator] = self.sums.get(denominator, 0) + numerator
        self.squares[denominator] = self.squares.get(denominator, 0) + numerator * numerator

    def total(self, power: int = 1) -> Fraction:
        """The exact sum of the finite values (``power=2``: of their squares)."""
        return _sum(self.squares if power == 2 else self.sums, power)

    def to_snapshot(self) -> list[Any]:
        return [encode(value) for value in self.ordered]

    @classmethod
    def from_snapshot(cls, data: Any, what: str) -> SortedValues:
        """Rebuild from :meth:`to_snapshot`; ``ValueError`` naming ``what`` for anything else."""
        if not isinstance(data, list):
            raise ValueError(f"{what} must be a list of numbers, got {type(data).__name__}")
        values = cls()
        for position, item in enumerate(data):
            value = decode(item)
            if value is None or value != value:
                raise ValueError(f"{what}[{position}] is not a number: {item!r:.80}")
            if values and value < values.ordered[-1]:
                raise ValueError(f"{what} is not in ascending order at [{position}]: {item!r:.80}")
            values.add(value)
        return values


def encode(value: Number) -> Any:
    """A number for a snapshot: an ``int`` past 64 bits as its digits (MessagePack has no bigger int)."""
    return str(value) if type(value) is int and not -(2**63) <= value < 2**64 else value


def decode(item: Any) -> Number | None:
    """The number :func:`encode` wrote, or ``None`` for anything else."""
    if isinstance(item, str) and _BIG_INT.fullmatch(item):
        value = int(item)
        return None if -(2**63) <= value < 2**64 else value
    return item if isinstance(item, int | float) else None


def _sum(numerators: dict[int, int], power: int) -> Fraction:
    """``sum(Fraction(n, d**power))``: every denominator is a power of two, so over the largest."""
    scale = max(numerators, default=1)
    return Fraction(sum(n * (scale // d) ** power for d, n in numerators.items()), scale**power)


def mapping(data: Any, keys: Iterable[str], what: str) -> dict[str, Any]:
    """``data`` if it is a dict of exactly ``keys``, else ``ValueError`` naming ``what``."""
    if not isinstance(data, dict) or data.keys() != set(keys):
        held = f"the keys {list(data)!r:.200}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise ValueError(f"{what} has the keys {sorted(keys)}, not {held}")
    return data


def saturate(value: Fraction) -> float:
    """The double nearest ``value``, or +/-``sys.float_info.max`` past the double range."""
    try:
        return float(value)
    except OverflowError:
        return sys.float_info.max if value > 0 else -sys.float_info.max


def sqrt(value: Fraction) -> float:
    """The square root of ``value >= 0`` correctly rounded, as ``statistics.pstdev`` rounds it
    (round to odd at 109 bits, then once to a double); saturated past the double range."""
    n, m = value.numerator, value.denominator
    shift = (n.bit_length() - m.bit_length() - 109) // 2
    if shift >= 0:
        m <<= 2 * shift
    else:
        n <<= -2 * shift
    root = math.isqrt(n // m)
    root |= root * root * m != n  # inexact: the sticky bit
    return saturate(Fraction(root) * Fraction(2) ** shift)
