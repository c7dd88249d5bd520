"""Dispatch latency tracker: the drain margin, and the latency numbers the sidecar exports.

Rollouts per hour on its own is misleading: more concurrency raises throughput while making
every task slower, until tasks breach their timeout. The tracker keeps the per-task durations
the dispatcher observed, so percentiles can be reported next to the rate, and derives the drain
margin (the least budget a new rollout needs before it is worth starting).

The seed API (``record``, ``record_failure``, ``record_drained``, ``drained``, ``quantile``,
``drain_margin``, ``summary``) returns the reference's numbers to the last bit. The dispatcher
asks for the drain margin before every dispatch, so the samples live in a plain sorted list while
they are few (cheapest at that size). Beyond that they live in sorted chunks of ``array('d')``
(8 bytes a float sample): a new sample costs a bisection and a short memmove, any order
statistic two bisections, also at ten million samples.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_right, insort
from collections.abc import Callable, Iterator, MutableSequence, Sequence
from itertools import accumulate, chain
from typing import Any, NamedTuple, overload

from sidecar.perf._summation import builtin_sum, format_positive_sum

__all__ = [
    "ADAPTIVE_MARGIN_MIN_SAMPLES",
    "ADAPTIVE_MARGIN_QUANTILE",
    "DEFAULT_RATE_WINDOW_S",
    "DispatchLatencyTracker",
    "LatencyPercentiles",
]

ADAPTIVE_MARGIN_MIN_SAMPLES = 5
"""Samples needed before ``drain_margin(None)`` adapts to the run's own p75."""
ADAPTIVE_MARGIN_QUANTILE = 0.75
DEFAULT_RATE_WINDOW_S = 900.0
"""Sliding window of :meth:`DispatchLatencyTracker.recent_completions_per_hour` (15 minutes)."""

# Up to this many samples ``bisect.insort`` into a flat list is the cheapest store (the memmove
# is tiny) and every quantile is a direct index; beyond it the O(n) insertion dominates and the
# chunked array store takes over. Measured in benchmarks/tracker.py.
_FLAT_LIST_LIMIT = 8192

_STAMPS_KEPT_EXPIRED = 4096
"""Expired completion stamps left in place before they are cut off in one go."""
_CHUNK_LOAD = 4096
"""Samples a chunk of the large store holds after a split (it splits past twice that)."""

_EMPTY_SUMMARY = "No completed rollouts to report latency for."


class LatencyPercentiles(NamedTuple):
    """The three latency quantiles the sidecar exports, in seconds."""

    p50: float
    p75: float
    p95: float


class DispatchLatencyTracker:
    """Per-task latency observed by the dispatcher, and the drain margin derived from it.

    ``clock`` (seconds, monotonic by default) only timestamps completions for the rates; the
    tracker never reads it for latency. ``rate_window_s`` is the sliding window of
    :meth:`recent_completions_per_hour`. Not thread-safe: use it from one event loop.
    """

    __slots__ = (
        "_clock",
        "_completion_times",
        "_drained",
        "_expired_completions",
        "_flat",
        "_large",
        "_rate_window_s",
        "_stamp",
        "_started_at",
        "_window_start",
    )

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rate_window_s: float = DEFAULT_RATE_WINDOW_S,
    ) -> None:
        if not rate_window_s > 0:
            raise ValueError(f"rate_window_s must be > 0 seconds, got {rate_window_s!r}")
        # Exactly one of the two sample stores is in use: ``_flat`` until it outgrows
        # _FLAT_LIST_LIMIT, then ``_large`` for good.
        self._flat: list[float] | None = []
        self._large: _LargeSamples | None = None
        self._drained = 0
        self._clock = clock
        self._rate_window_s = float(rate_window_s)
        self._started_at = clock()
        # Completion stamps, oldest first; those before ``_window_start`` have left the rate
        # window (cut off in bulk now and then): 8 bytes a stamp, not a float object each.
        self._completion_times = array("d")
        self._window_start = 0
        self._stamp = self._completion_times.append
        self._expired_completions = 0

    def to_snapshot(self) -> dict[str, Any]:
        """Plain values for a state snapshot (the clock is not state: ``from_snapshot`` takes it)."""
        large = self._large
        return {
            "samples": list(self._ordered()),
            "total": None if large is None else large._total,
            "drained": self._drained,
            "rate_window_s": self._rate_window_s,
            "started_at": self._started_at,
            "times": self._completion_times[self._window_start :].tolist(),
            "expired": self._expired_completions,
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], *, clock: Callable[[], float]) -> DispatchLatencyTracker:
        tracker = cls(clock=lambda: 0.0, rate_window_s=data["rate_window_s"])  # no clock read: not state
        tracker._clock = clock
        samples = list(data["samples"])
        if len(samples) <= _FLAT_LIST_LIMIT and data["total"] is None:
            tracker._flat = samples
        else:
            tracker._flat = None
            tracker._large = _LargeSamples(samples)
            tracker._large._total = float(data["total"])
        tracker._drained = int(data["drained"])
        tracker._started_at = data["started_at"]
        tracker._completion_times = array("d", data["times"])
        tracker._stamp = tracker._completion_times.append
        tracker._expired_completions = int(data["expired"])
        return tracker

    # -- seed API ---------------------------------------------------------------------------

    def record(self, seconds: float) -> None:
        """Add one completed task's duration; values that are not ``> 0`` (incl. NaN) are dropped."""
        if seconds > 0:
            flat = self._flat
            if flat is not None and len(flat) < _FLAT_LIST_LIMIT:
                insort(flat, seconds)
                self._stamp(self._clock())
            else:
                self._add_large(seconds)
                now = self._clock()
                times = self._completion_times
                times.append(now)
                if times[self._window_start] <= now - self._rate_window_s:
                    self._expire(now)

    def record_failure(self, seconds: float) -> None:
        """Record a failed attempt only when it ran at least as long as the median so far.

        A task that died late shows how long tasks can run, so it may raise the drain margin; one
        that failed at once says nothing about duration and would drag the p75 toward zero. Any
        failure before a real completion exists is ignored. A kept failure is an ordinary sample
        from then on (quantiles, the 5-sample threshold, ``summary()``), but not a completion for
        the rates.
        """
        median = self.quantile(0.5)
        if median is None or not seconds >= median:
            return
        flat = self._flat
        if flat is not None and len(flat) < _FLAT_LIST_LIMIT:
            insort(flat, seconds)
        else:
            self._add_large(seconds)

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
        samples = self._ordered()
        n = len(samples)
        if not n:
            return None
        position = (n - 1) * q
        i = int(position)
        fraction = position - i
        j = i + 1 if i + 1 < n - 1 else n - 1
        return samples[i] * (1 - fraction) + samples[j] * fraction

    def drain_margin(self, configured: float | None) -> float | None:
        """Seconds of headroom a task needs before it is worth starting.

        An explicit value wins, ``0.0`` included. Otherwise the run's own p75 once at least five
        samples exist; before that ``None`` (no adaptive margin yet).
        """
        if configured is not None:
            return configured
        flat = self._flat
        if flat is None:
            assert self._large is not None
            return self._large.p75()
        n = len(flat)
        if n < ADAPTIVE_MARGIN_MIN_SAMPLES:
            return None
        # quantile(0.75), inlined because it runs before every dispatch. (n - 1) * 0.75 is exact
        # in binary, so its integer part and fraction come from integer arithmetic, bit for bit.
        quarters = 3 * (n - 1)
        i = quarters >> 2
        fraction = (quarters & 3) * 0.25
        return flat[i] * (1 - fraction) + flat[i + 1] * fraction

    def summary(self) -> str:
        """End-of-run text: latency percentiles in minutes, task-hours, and drained rows."""
        lines: list[str] = []
        samples = self._ordered()
        if samples:
            median, p90, p99 = self.quantile(0.5), self.quantile(0.9), self.quantile(0.99)
            assert median is not None and p90 is not None and p99 is not None
            lines.append(
                f"Per-task latency over {len(samples)} completed rollout(s): "
                f"median {median / 60:.1f} min, p90 {p90 / 60:.1f} min, "
                f"p99 {p99 / 60:.1f} min, max {samples[-1] / 60:.1f} min"
            )
            lines.append(f"Task-time delivered: {format_positive_sum(samples, 3600, '.1f')} task-hours")
        else:
            lines.append(_EMPTY_SUMMARY)
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
        if self._flat is not None:
            return len(self._flat)
        assert self._large is not None
        return len(self._large)

    @property
    def completions(self) -> int:
        """Number of durations ``record`` kept (kept failures are not completions)."""
        return self._expired_completions + len(self._completion_times) - self._window_start

    @property
    def total_seconds(self) -> float:
        """Task-seconds delivered by every sample (a running sum; ``summary()`` re-adds in sorted order)."""
        if self._flat is not None:
            return float(builtin_sum(self._flat))
        assert self._large is not None
        return self._large.total()

    @property
    def rate_window_s(self) -> float:
        """Length of the sliding window of :meth:`recent_completions_per_hour`, in seconds."""
        return self._rate_window_s

    def percentiles(self) -> LatencyPercentiles | None:
        """p50, p75 and p95 in one call (the numbers ``quantile`` gives); ``None`` without samples."""
        p50 = self.quantile(0.5)
        p75 = self.quantile(0.75)
        p95 = self.quantile(0.95)
        if p50 is None or p75 is None or p95 is None:
            return None
        return LatencyPercentiles(p50, p75, p95)

    def samples(self) -> list[float]:
        """A sorted copy of the samples, values as recorded (an int stays an int)."""
        return list(self._ordered())

    def completions_per_hour(self) -> float | None:
        """Completions per hour since the tracker was created; ``None`` until the clock has advanced."""
        elapsed = self._clock() - self._started_at
        if elapsed <= 0:
            return None
        return self.completions * 3600.0 / elapsed

    def recent_completions_per_hour(self) -> float | None:
        """Completions per hour over the last ``rate_window_s`` seconds.

        A completion stamped exactly ``rate_window_s`` ago has left the window. Early in the run
        the window is shortened to the time since creation, so the first minutes are not
        under-reported. ``None`` until the clock has advanced.
        """
        now = self._clock()
        elapsed = now - self._started_at
        if elapsed <= 0:
            return None
        self._expire(now)
        in_window = len(self._completion_times) - self._window_start
        return in_window * 3600.0 / min(self._rate_window_s, elapsed)

    # -- internals --------------------------------------------------------------------------

    def _ordered(self) -> Sequence[float]:
        if self._flat is not None:
            return self._flat
        assert self._large is not None
        return self._large.ordered()

    def _add_large(self, seconds: float) -> None:
        """Add to the large store, moving the flat list into it first if that is still in use."""
        large = self._large
        if large is None:
            assert self._flat is not None
            large = self._large = _LargeSamples(self._flat)
            self._flat = None
        large.add(seconds)

    def _expire(self, now: float) -> None:
        """Forget completion timestamps that fell out of the rate window (kept as a count)."""
        times = self._completion_times
        cutoff = now - self._rate_window_s
        start = first = self._window_start
        end = len(times)
        while start < end and times[start] <= cutoff:
            start += 1
        self._expired_completions += start - first
        if start > _STAMPS_KEPT_EXPIRED and 2 * start > end:
            del times[:start]  # one memmove for many stamps
            start = 0
        self._window_start = start


class _LargeSamples(Sequence[float]):
    """Samples beyond the flat list, in ascending order, as a list of sorted chunks.

    A chunk is an ``array('d')`` (8 bytes a sample) while every sample is a ``float``; the first
    sample of another type (an ``int`` stays an ``int``, as recorded) turns every chunk into a
    list for good, so values and quantiles stay exact. ``_maxes`` holds each chunk's last value
    (where a new sample goes: ``bisect_right``, so equal values keep insertion order) and
    ``_ends`` the running chunk sizes, rebuilt after a change only when a position is asked for:
    finding the k-th sample is two bisections. The drain margin, asked before every dispatch,
    reads a cursor instead: ``_cursor`` is the chunk holding the p75's lower order statistic and
    ``_before`` the samples in the chunks before it, moved by at most a chunk per new sample.
    """

    __slots__ = ("_before", "_chunks", "_cursor", "_ends", "_maxes", "_size", "_total")

    def __init__(self, ascending: list[float]) -> None:
        self._chunks: list[MutableSequence[float]] = []
        for start in range(0, len(ascending), _CHUNK_LOAD):
            self._chunks.append(list(ascending[start : start + _CHUNK_LOAD]))
        self._maxes = [chunk[-1] for chunk in self._chunks]
        if all(type(value) is float for value in ascending):
            self._chunks = [array("d", chunk) for chunk in self._chunks]
        self._size = len(ascending)
        self._ends: list[int] | None = None
        self._cursor = 0
        self._before = 0
        self._seek()
        self._total = float(builtin_sum(ascending))

    def __len__(self) -> int:
        return self._size

    def add(self, seconds: float) -> None:
        chunks, maxes = self._chunks, self._maxes
        if type(seconds) is not float and chunks and type(chunks[0]) is array:
            self._chunks = chunks = [list(chunk) for chunk in chunks]
        self._total += seconds
        self._size += 1
        self._ends = None
        at = bisect_right(maxes, seconds)
        if at == len(chunks):
            at -= 1
            maxes[at] = seconds
        chunk = chunks[at]
        insort(chunk, seconds)
        if at < self._cursor:
            self._before += 1
        if len(chunk) > 2 * _CHUNK_LOAD:
            chunks.insert(at + 1, chunk[_CHUNK_LOAD:])
            del chunk[_CHUNK_LOAD:]
            maxes[at] = chunk[-1]
            maxes.insert(at + 1, chunks[at + 1][-1])
            if at < self._cursor:
                self._cursor += 1
        self._seek()

    def _seek(self) -> None:
        """Move the cursor to the chunk holding sample ``int((n - 1) * 0.75)``."""
        target = (3 * (self._size - 1)) >> 2  # (n - 1) * 0.75 is exact in binary
        chunks = self._chunks
        while target - self._before >= len(chunks[self._cursor]):
            self._before += len(chunks[self._cursor])
            self._cursor += 1
        while target < self._before:
            self._cursor -= 1
            self._before -= len(chunks[self._cursor])

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...

    def __getitem__(self, index: int | slice) -> float | list[float]:
        """The ``index``-th smallest sample (negative counts from the end)."""
        if isinstance(index, slice):
            return self._slice(index)
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        ends = self._chunk_ends()
        at = bisect_right(ends, index)
        return self._chunks[at][index - (ends[at - 1] if at else 0)]

    def _chunk_ends(self) -> list[int]:
        ends = self._ends
        if ends is None:
            ends = self._ends = list(accumulate(map(len, self._chunks)))
        return ends

    def _slice(self, window: slice) -> list[float]:
        """``window`` of the ascending samples, reading only the chunks it spans."""
        start, stop, step = window.indices(self._size)
        if step != 1:
            return list(self)[window]
        out: list[float] = []
        if start >= stop:
            return out
        ends = self._chunk_ends()
        at = bisect_right(ends, start)
        offset = ends[at - 1] if at else 0
        while offset < stop:
            chunk = self._chunks[at]
            out += chunk[max(start - offset, 0) : stop - offset]
            offset += len(chunk)
            at += 1
        return out

    def __iter__(self) -> Iterator[float]:
        return chain.from_iterable(self._chunks)

    def p75(self) -> float:
        quarters = 3 * (self._size - 1)  # (n - 1) * 0.75 is exact in binary: integer arithmetic
        fraction = (quarters & 3) * 0.25
        chunk = self._chunks[self._cursor]
        local = (quarters >> 2) - self._before
        upper = chunk[local + 1] if local + 1 < len(chunk) else self._chunks[self._cursor + 1][0]
        return chunk[local] * (1 - fraction) + upper * fraction

    def ordered(self) -> Sequence[float]:
        """Every sample in ascending order, equal values in insertion order (as ``insort`` keeps them)."""
        return self

    def total(self) -> float:
        return self._total
