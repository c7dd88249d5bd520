"""The fixed-bucket duration histogram's quantile estimate (the per-agent latency on the page)."""

from __future__ import annotations

import pytest

from sidecar.state.durations import DurationHistogram


class TestDurationHistogramQuantile:
    def test_none_before_any_observation(self) -> None:
        assert DurationHistogram().quantile(0.5) is None

    def test_linear_within_the_bucket_narrowed_to_the_observations(self) -> None:
        histogram = DurationHistogram()
        for seconds in (0.5, 1.5, 1.7, 3.0, 100.0):
            histogram.observe(seconds)
        assert histogram.quantile(0.5) == pytest.approx(1.75)  # rank 2.5 of the (1, 2] bucket's 2
        assert histogram.quantile(0.0) == 0.5 and histogram.quantile(1.0) == 100.0

    def test_the_inf_bucket_reaches_the_largest_observation(self) -> None:
        histogram = DurationHistogram()
        for seconds in (30_000.0, 40_000.0):
            histogram.observe(seconds)
        assert histogram.quantile(0.5) == 35_000.0  # between the smallest and largest it holds
        assert histogram.quantile(1.0) == 40_000.0
