"""A run's timeline: at most ``max_points`` cumulative points, by each fact's journaled ``at``,
merged 2:1 when full, so a replay rebuilds it point for point (docs/report.md)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

__all__ = [
    "BASE_BUCKET_S",
    "MAX_POINTS",
    "Timeline",
    "TimelineBody",
    "TimelineSample",
    "TimelineSeries",
    "TimelineSource",
]

#: Points a timeline holds at most (however long the run).
MAX_POINTS = 1024
#: Width of a point before the first merge: 1,024 one-second points cover the first 17 minutes;
#: each merge doubles it (a week-long run ends with 1,024 s points, ~590 of them).
BASE_BUCKET_S = 1.0
#: Merges after which a timeline stops growing its buckets (2**60 s: past any run's length).
_MAX_MERGES = 60
_NAN = math.nan


class TimelineSample(NamedTuple):
    """The run at one moment: cumulative counters of the events with a time, then gauges
    (``None``: not defined then)."""

    started: int
    completed: int
    failed: int
    drained: int
    in_flight: int
    stragglers: int
    drain_margin_s: float | None
    seconds_left: float | None
    healthy: int
    unhealthy: int


_FIELDS = TimelineSample._fields
_WIDTH = len(_FIELDS)
_COUNTS = ("started", "completed", "failed", "drained")
_COUNT_AT = tuple(_FIELDS.index(name) for name in _COUNTS)
_COMPLETED = _FIELDS.index("completed")
_INTS = frozenset(
    ("started", "completed", "failed", "drained", "in_flight", "stragglers", "healthy", "unhealthy")
)
#: Counters are kept as doubles (8 bytes a value): exact up to 2**53, clamped there.
_INT_CAP = 2**53
ZERO_SAMPLE = TimelineSample(0, 0, 0, 0, 0, 0, None, None, 0, 0)


@with_config(ConfigDict(extra="forbid"))
class TimelineSeries(TypedDict):
    """The timeline's columns (``docs/report.md``): per-interval counts of the events with a time,
    gauges at each point's end."""

    started: list[int]
    completed: list[int]
    failed: list[int]
    drained: list[int]
    in_flight: list[int]
    stragglers: list[int]
    rollouts_per_hour: list[float | None]
    drain_margin_s: list[float | None]
    seconds_left: list[float | None]
    healthy: list[int]
    unhealthy: list[int]


@with_config(ConfigDict(extra="forbid"))
class TimelineBody(TypedDict):
    """``GET /v1/runs/{run_id}/timeline``: at most ``max_points`` points, one column per series."""

    run_id: str
    status: Literal["running", "ended"]
    frozen: bool
    bucket_s: float
    max_points: int
    started_at: float | None
    ended_at: float | None
    t: list[float]
    series: TimelineSeries


class TimelineSource(Protocol):
    """What the timeline samples: the run's state, at each of ``times`` (ascending), all taken
    from the same state (only the time-dependent gauges differ between them)."""

    def timeline_samples(self, times: Sequence[float]) -> list[TimelineSample]: ...


def _stored(value: int | float | None) -> float:
    if value is None:
        return _NAN
    if type(value) is int and not -_INT_CAP <= value <= _INT_CAP:
        return float(_INT_CAP if value > 0 else -_INT_CAP)
    return float(value)


class Timeline:
    """The fixed-size time series of one run; ``baseline``: the counters at ``origin``."""

    __slots__ = ("_columns", "_edge", "_end_t", "_last", "baseline", "bucket_s", "max_points", "origin")

    def __init__(
        self,
        origin: float | None,
        *,
        baseline: TimelineSample = ZERO_SAMPLE,
        bucket_s: float = BASE_BUCKET_S,
        max_points: int = MAX_POINTS,
    ) -> None:
        if not (math.isfinite(bucket_s) and bucket_s > 0):
            raise ValueError(f"bucket_s must be a positive number, got {bucket_s!r}")
        if not (isinstance(max_points, int) and max_points >= 2):
            raise ValueError(f"max_points must be an int >= 2, got {max_points!r}")
        if origin is not None and not math.isfinite(origin):
            raise ValueError(f"origin must be a finite time, got {origin!r}")
        self.origin = origin
        self.baseline = baseline
        self.bucket_s = bucket_s
        self.max_points = max_points
        #: One column per sample field; row ``i`` is closed point ``i`` (``None`` stored as NaN).
        self._columns: list[array[float]] = [array("d") for _ in range(_WIDTH)]
        #: Latest fact time seen (the open point's end so far).
        self._last = origin if origin is not None else -math.inf
        #: End of the open point: a fact before it changes nothing but ``_last`` (the fast path).
        self._edge = -math.inf if origin is None else origin + bucket_s
        #: Time of the final point (the run's end); ``None`` while the run goes on.
        self._end_t: float | None = None

    def __repr__(self) -> str:
        state = "frozen" if self.frozen else "open"
        return f"Timeline(origin={self.origin!r}, bucket_s={self.bucket_s!r}, points={self.closed}, {state})"

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "baseline": list(self.baseline),
            "bucket_s": self.bucket_s,
            "max_points": self.max_points,
            "columns": [column.tobytes() for column in self._columns],
            "last": self._last,
            "edge": self._edge,
            "end_t": self._end_t,
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> Timeline:
        timeline = cls(
            data["origin"],
            baseline=TimelineSample(*data["baseline"]),
            bucket_s=data["bucket_s"],
            max_points=data["max_points"],
        )
        columns = [array("d", column) for column in data["columns"]]
        if len(columns) != _WIDTH or len({len(column) for column in columns}) > 1:
            raise ValueError(
                f"timeline snapshot: {len(columns)} columns of unequal lengths, expected {_WIDTH}"
            )
        timeline._columns = columns
        timeline._last, timeline._edge, timeline._end_t = data["last"], data["edge"], data["end_t"]
        return timeline

    @property
    def frozen(self) -> bool:
        """True once the run ended: nothing changes the timeline any more."""
        return self._end_t is not None

    @property
    def latest(self) -> float:
        """The latest time seen (the end, once frozen; ``origin`` before any fact)."""
        return self._last

    @property
    def closed(self) -> int:
        """Points closed so far (the final one included once frozen)."""
        return len(self._columns[0])

    def advance(self, at: float, source: TimelineSource) -> None:
        """A fact that happened at ``at`` is about to be applied to ``source``."""
        if at < self._edge:
            if at > self._last:
                self._last = at
            return
        self._cross(at, source)

    def end(self, at: float | None, source: TimelineSource) -> None:
        """The run ended at ``at`` (``None``: at its latest fact): close every point up to it,
        then the last one there, and freeze. A timeline that never had a time stays empty."""
        if self.frozen:
            return
        if self.origin is None:
            self.freeze()
            return
        if at is not None:
            self.advance(at, source)
        self._append(source.timeline_samples([self._last]))
        self._end_t = self._last
        self._edge = math.inf

    def freeze(self) -> None:
        """Change no more (a run restored as ended from a snapshot without a timeline keeps none)."""
        self._end_t = self._last
        self._edge = math.inf

    def _cross(self, at: float, source: TimelineSource) -> None:
        if self.frozen or not math.isfinite(at):
            return
        if self.origin is None:
            self.origin = self._last = at
            self.baseline = source.timeline_samples([at])[0]
            self._edge = at + self.bucket_s
            return
        if at > self._last:
            self._last = at
        origin = self.origin
        index = math.floor((at - origin) / self.bucket_s)
        merges = 0
        while index >= self.max_points and merges < _MAX_MERGES:
            self._merge()
            merges += 1
            index = math.floor((at - origin) / self.bucket_s)
        index = min(index, self.max_points - 1)
        width = self.bucket_s
        open_index = self.closed
        if index > open_index:
            ends = [origin + (point + 1) * width for point in range(open_index, index)]
            self._append(source.timeline_samples(ends))
            open_index = index
        self._edge = origin + (open_index + 1) * width

    def _merge(self) -> None:
        """Merge adjacent points 2:1 and double the bucket width (a point keeps the later one's
        values); a last closed point without its pair joins the open point."""
        for column in self._columns:
            column[:] = column[1::2]
        self.bucket_s *= 2

    def _append(self, samples: list[TimelineSample]) -> None:
        for position, column in enumerate(self._columns):
            column.extend(_stored(sample[position]) for sample in samples)

    def columns(self, source: TimelineSource) -> tuple[list[float], dict[str, list[Any]]]:
        """``(t, series)`` of the ``/timeline`` body; a running run's open point is sampled now."""
        origin = self.origin
        count = self.closed
        if origin is None or (self.frozen and not count):
            return [], {name: [] for name in _SERIES}
        width = self.bucket_s
        times = [origin + (point + 1) * width for point in range(count)]
        raw: list[list[Any]] = [
            [None if value != value else value for value in column] for column in self._columns
        ]
        if self._end_t is not None:
            times[-1] = self._end_t
        else:
            last = source.timeline_samples([self._last])[0]
            times.append(self._last)
            for position, column in enumerate(raw):
                value = _stored(last[position])
                column.append(None if value != value else value)
        for position, name in enumerate(_FIELDS):
            if name in _INTS:
                raw[position] = [None if value is None else int(value) for value in raw[position]]
        series: dict[str, list[Any]] = {}
        starts = [origin, *times[:-1]]
        for name, position in zip(_COUNTS, _COUNT_AT, strict=True):
            cumulative = raw[position]
            previous = [int(_stored(self.baseline[position])), *cumulative[:-1]]
            series[name] = [now - before for now, before in zip(cumulative, previous, strict=True)]
        per_hour = []
        for done, start, stop in zip(series["completed"], starts, times, strict=True):
            span = stop - start
            per_hour.append(done * 3600.0 / span if span > 0 else None)
        for name in _GAUGES:
            series[name] = raw[_FIELDS.index(name)]
        series["rollouts_per_hour"] = per_hour
        return times, {name: series[name] for name in _SERIES}

    def rate(self, completed: int, window_s: float | None = None) -> float | None:
        """Completions per hour since ``origin`` (or over the last ``window_s``, from a point
        boundary so count and span agree); ``None`` without a span."""
        origin = self.origin
        if origin is None:
            return None
        column = self._columns[_COMPLETED]
        end, count = self._last, float(completed)
        if self.frozen:
            if not column:
                return None
            count = column[-1]
        start, before = origin, _stored(self.baseline[_COMPLETED])
        if window_s is not None:
            point = math.floor((end - window_s - origin) / self.bucket_s) - 1
            if 0 <= point < len(column) - (1 if self.frozen else 0):
                start, before = origin + (point + 1) * self.bucket_s, column[point]
        span = end - start
        return (count - before) * 3600.0 / span if span > 0 else None


_GAUGES = ("in_flight", "stragglers", "drain_margin_s", "seconds_left", "healthy", "unhealthy")
#: The body's series, in the order they are written.
_SERIES = tuple(TimelineSeries.__annotations__)
