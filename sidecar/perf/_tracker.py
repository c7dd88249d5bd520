"""Dispatch latency: NeMo Gym's ``DispatchLatencyTracker`` and the drain decision made with it.

Rollouts per hour alone misleads: more concurrency raises throughput while every task gets
slower, until tasks breach their timeout. So the tracker keeps the per-task durations (for
percentiles beside the rate) and derives the drain margin, the least budget a new rollout needs
to be worth starting, to the reference's last bit; its samples are a ``SortedList`` (O(log n)).
"""

from __future__ import annotations

import math
from typing import Any

from sidecar.perf._values import SortedValues, mapping

__all__ = ["DRAINED_FAILURE_CLASS", "DispatchLatencyTracker", "drained_result", "should_drain"]

ADAPTIVE_MARGIN_MIN_SAMPLES = 5  # before this many samples ``drain_margin(None)`` has no p75 to use
DRAINED_FAILURE_CLASS = "cancelled"  # ``_ng_failure_class`` of a drained row

_SNAPSHOT_KEYS = frozenset({"samples", "drained"})


class DispatchLatencyTracker:
    """Per-task latency observed by the dispatcher, and the drain margin derived from it.

    It reads no clock (a run's rates come from its events' times, :mod:`sidecar.state.timeline`).
    Not thread-safe: use it from one event loop.
    """

    __slots__ = ("_drained", "_samples")

    def __init__(self) -> None:
        self._samples = SortedValues()
        self._drained = 0

    # -- seed API ---------------------------------------------------------------------------

    def record(self, seconds: float) -> None:
        """Add one completed task's duration; values that are not ``> 0`` (incl. NaN) are dropped."""
        if seconds > 0:
            self._samples.add(seconds)

    def record_failure(self, seconds: float) -> None:
        """Keep a failed attempt as a sample only if it ran at least as long as the median so far.

        A task that died late shows how long tasks run and may raise the margin; one that failed at
        once would drag the p75 toward zero. Before any completion nothing is kept. A kept failure
        is an ordinary sample (quantiles, the 5-sample threshold, ``summary()``), not a completion.
        """
        median = self.quantile(0.5)
        if median is not None and seconds >= median:
            self._samples.add(seconds)

    def record_drained(self) -> None:
        """Count one row the dispatcher decided not to start (no time left in the budget)."""
        self._drained += 1

    @property
    def drained(self) -> int:
        """How many rows were drained (never dispatched)."""
        return self._drained

    def quantile(self, q: float) -> float | None:
        """Linear interpolation between order statistics; ``None`` without samples.

        Evaluated as ``x[i] * (1 - f) + x[j] * f`` in exactly this order, so results match the
        reference bit for bit. ``q`` is meant to be in ``[0, 1]`` and is not validated.
        """
        return self._at(q) if self._samples else None

    def _at(self, q: float) -> float:
        samples = self._samples.ordered
        last = len(samples) - 1
        i = int(last * q)
        fraction = last * q - i
        return samples[i] * (1 - fraction) + samples[min(i + 1, last)] * fraction  # type: ignore[no-any-return]

    def drain_margin(self, configured: float | None) -> float | None:
        """Seconds of headroom a task needs before it is worth starting.

        An explicit value wins, ``0.0`` included. Otherwise the run's own p75 once at least five
        samples exist; before that ``None`` (no adaptive margin yet).
        """
        if configured is not None:
            return configured
        if len(self._samples) < ADAPTIVE_MARGIN_MIN_SAMPLES:
            return None
        return self.quantile(0.75)

    def summary(self) -> str:
        """End-of-run text: latency percentiles in minutes, task-hours, and drained rows."""
        lines: list[str] = []
        if self._samples:
            lines.append(
                f"Per-task latency over {len(self._samples)} completed rollout(s): "
                f"median {self._at(0.5) / 60:.1f} min, p90 {self._at(0.9) / 60:.1f} min, "
                f"p99 {self._at(0.99) / 60:.1f} min, max {self._samples.ordered[-1] / 60:.1f} min"
            )
            lines.append(f"Task-time delivered: {self.total_seconds / 3600:.1f} task-hours")
        else:
            lines.append("No completed rollouts to report latency for.")
        if self._drained > 0:
            lines.append(
                f"Drained (not dispatched, no time left in the budget): {self._drained}. "
                "These wrote no row and will be re-dispatched on resume."
            )
        return "\n".join(lines)

    # -- exported numbers -------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Number of samples (completions plus kept failures), as ``summary()`` counts them."""
        return len(self._samples)

    @property
    def total_seconds(self) -> float:
        """Task-seconds of every sample: their exact sum, correctly rounded (as ``math.fsum``).

        The reference adds with CPython 3.12+'s compensated ``sum``, which lands on the same
        double but for a last-bit case that would also have to sit on a ``.1f`` boundary of the
        task-hours to show."""
        samples = self._samples
        try:
            return math.inf if samples and samples.ordered[-1] == math.inf else float(samples.total())
        except OverflowError:
            return math.inf

    def samples(self) -> list[float]:
        """A sorted copy of the samples, values as recorded (an int stays an int)."""
        return list(self._samples.ordered)

    # -- snapshots --------------------------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        """The tracker as plain values (MessagePack-encodable)."""
        return {"samples": self._samples.to_snapshot(), "drained": self._drained}

    @classmethod
    def from_snapshot(cls, data: Any) -> DispatchLatencyTracker:
        """The tracker :meth:`to_snapshot` described; ``ValueError`` naming the part at fault for
        any other shape."""
        data = mapping(data, _SNAPSHOT_KEYS, "a tracker snapshot")
        samples = SortedValues.from_snapshot(data["samples"], "tracker samples")
        if samples and not samples.ordered[0] > 0:
            raise ValueError(f"tracker samples must be > 0, got {samples.ordered[0]!r}")
        drained = data["drained"]
        if type(drained) is not int or drained < 0:
            raise ValueError(f"tracker drained must be an int >= 0, got {drained!r:.80}")
        tracker = cls()
        tracker._samples, tracker._drained = samples, drained
        return tracker


def should_drain(remaining_s: float, margin_s: float | None) -> bool:
    """Whether a row about to start should be drained instead.

    ``remaining_s`` is the budget left now (deadline minus monotonic now), ``margin_s`` the
    tracker's ``drain_margin(configured)``. Drains when the budget is spent or strictly less than
    the margin is left: ``remaining_s == margin_s`` is still dispatched.
    """
    return remaining_s <= 0 or (margin_s is not None and remaining_s < margin_s)


def drained_result(remaining_s: float, margin_s: float | None) -> dict[str, Any]:
    """The result Gym completes a drained row with: four keys, written to no file.

    The margin wording is used whenever a margin exists, even when the trigger was a spent
    budget, so ``-0s left`` and equal-looking numbers (``40s left ... below the 40s``) occur.
    """
    message = (
        f"not dispatched: {remaining_s:.0f}s left in dispatch budget, below the {margin_s:.0f}s drain margin"
        if margin_s is not None
        else "not dispatched: dispatch budget exhausted"
    )
    return {
        "_ng_failure_class": DRAINED_FAILURE_CLASS, "_ng_no_persist": True, "_ng_dispatch_drained": True,
        "error_message": message,
    }
