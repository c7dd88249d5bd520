"""Durations in fixed buckets (memory fixed however many rollouts); quantiles are estimates."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DURATION_BUCKETS", "DurationHistogram"]

#: Upper bounds (seconds) of the buckets; one more bucket (``+Inf``) holds the rest.
DURATION_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200, 10800, 14400, 21600,
)  # fmt: skip


@dataclass(slots=True)
class DurationHistogram:
    """Cumulative-bucket histogram over :data:`DURATION_BUCKETS` (plus ``+Inf``)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total: float = 0.0
    observations: int = 0
    #: Smallest and largest observation (the OTLP histogram carries them), ``None`` before the first.
    low: float | None = None
    high: float | None = None

    def observe(self, seconds: float) -> None:
        if seconds != seconds:  # NaN has no bucket
            return
        self.counts[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.total += seconds
        self.observations += 1
        low = self.low
        if low is None or seconds < low:
            self.low = seconds
        high = self.high
        if high is None or seconds > high:
            self.high = seconds

    def to_snapshot(self) -> list[Any]:
        return [self.counts, self.total, self.observations, self.low, self.high]

    @classmethod
    def from_snapshot(cls, data: list[Any]) -> DurationHistogram:
        counts, total, observations, low, high = data
        if len(counts) != len(DURATION_BUCKETS) + 1:
            raise ValueError(
                f"duration snapshot: {len(counts)} buckets, expected {len(DURATION_BUCKETS) + 1}"
            )
        return cls(list(counts), float(total), int(observations), low, high)

    def cumulative(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile, linear within the bucket holding its rank, buckets narrowed to the
        smallest and largest observation; ``None`` before any."""
        low, high = self.low, self.high
        if low is None or high is None or not self.observations:
            return None
        rank = q * self.observations
        running = 0
        last = len(DURATION_BUCKETS)
        for index, count in enumerate(self.counts):
            if count and running + count >= rank:
                lower = low if index == 0 else max(low, float(DURATION_BUCKETS[index - 1]))
                upper = high if index == last else min(high, float(DURATION_BUCKETS[index]))
                return lower + (upper - lower) * max(rank - running, 0.0) / count
            running += count
        return high
