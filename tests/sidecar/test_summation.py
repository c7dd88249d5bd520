"""emulated_sum: CPython 3.12+ ``sum()`` arithmetic on any interpreter."""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.perf._summation import emulated_sum, format_positive_sum


class TestEmulatedSum:
    def test_compensated_floats(self) -> None:
        assert emulated_sum([0.1] * 10) == 1.0
        assert emulated_sum([1e100, 1.0, -1e100]) == 1.0

    def test_integers_stay_exact_integers(self) -> None:
        total = emulated_sum([2**60, 2**60, 3])
        assert type(total) is int and total == 2**61 + 3
        assert emulated_sum([]) == 0 and type(emulated_sum([])) is int

    def test_integers_after_a_float_are_plain_doubles(self) -> None:
        assert emulated_sum([0.5, 2**53, 1]) == float(2**53)

    def test_infinities_are_not_turned_into_nan(self) -> None:
        assert emulated_sum([1.0, math.inf, 1.0]) == math.inf

    def test_rejects_other_types(self) -> None:
        with pytest.raises(TypeError, match="unsupported value '1'"):
            emulated_sum([1.0, "1"])  # type: ignore[list-item]

    @pytest.mark.skipif(sys.version_info < (3, 12), reason="built-in sum() compensates from 3.12 on")
    @settings(max_examples=200)
    @given(
        st.lists(
            st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**62), 2**62)),
            max_size=30,
        )
    )
    def test_matches_the_builtin(self, values: list[float]) -> None:
        assert repr(emulated_sum(values)) == repr(sum(values))


positive = st.one_of(
    st.floats(min_value=1e-9, max_value=1e7, allow_nan=False),
    st.integers(min_value=1, max_value=10**7),
    st.sampled_from([0.1, 0.2, 0.3, 0.7, 1.1, 179.99999999999997, math.inf]),
)


class TestFormatPositiveSum:
    @settings(max_examples=300)
    @given(
        st.lists(positive, min_size=1, max_size=40),
        st.sampled_from([1, 60, 3600]),
        st.sampled_from([".1f", ".3f"]),
    )
    def test_equals_formatting_the_compensated_sum(
        self, values: list[float], divisor: int, spec: str
    ) -> None:
        assert format_positive_sum(values, divisor, spec) == format(emulated_sum(values) / divisor, spec)

    def test_rounding_boundary_cases(self) -> None:
        # These sum to within a few ulps of 180 s = 0.05 h, a .1f rounding boundary: the fast
        # band cannot decide and the compensated sum does (the reference prints 0.1).
        samples = [0.1] + [0.2] * 8 + [0.3] * 10 + [0.7] * 9 + [1.1] * 3 + [165.7]
        assert (
            format_positive_sum(samples, 3600, ".1f") == format(emulated_sum(samples) / 3600, ".1f") == "0.1"
        )
        assert (
            format_positive_sum([180.0], 3600, ".1f") == "0.1"
        )  # 0.05 rounds to even... of its binary value
