"""The computation a run composes, behind one injectable bundle.

The service never re-implements the perf core or the health pipeline: a run holds a
``DispatchLatencyTracker``, a perf-summary state and a ``HealthReducer`` and feeds them
through the functions gathered here. :func:`default_engines` wires the real modules;
tests may inject others (the style guide's "inject collaborators").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from health.types import Finding, TaskIndex

__all__ = ["Clock", "Engines", "PerfSummaryLike", "ReducerLike", "TrackerLike", "default_engines"]

Clock = Callable[[], float]


class TrackerLike(Protocol):
    def record(self, seconds: float) -> None: ...
    def record_failure(self, seconds: float) -> None: ...
    def record_drained(self) -> None: ...
    @property
    def drained(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def total_seconds(self) -> float: ...
    def quantile(self, q: float) -> float | None: ...
    def drain_margin(self, configured: float | None) -> float | None: ...
    def summary(self) -> str: ...
    def samples(self) -> list[float]: ...
    def completions_per_hour(self) -> float | None: ...
    def recent_completions_per_hour(self) -> float | None: ...


class ReducerLike(Protocol):
    def add_compact(self, digest: Any) -> None: ...
    def close_task(self, task_index: TaskIndex) -> list[Finding]: ...
    def summary(self) -> dict[str, Any]: ...
    def summary_bytes(self) -> bytes: ...
    def iter_verdict_lines(self) -> Iterator[bytes]: ...
    def __len__(self) -> int: ...


class PerfSummaryLike(Protocol):
    def add(self, ng_perf: Mapping[str, Any]) -> None: ...
    def result(self, total_rollouts: int) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Engines:
    """Factories and pure functions one run needs.

    ``digest_record`` / ``digest_line`` return a *compact* digest (what the reducer keeps);
    ``digest_task_index`` reads the coerced task index back from one.
    """

    new_tracker: Callable[[Clock], TrackerLike]
    new_reducer: Callable[[Iterable[str]], ReducerLike]
    new_perf_summary: Callable[[], PerfSummaryLike]
    digest_record: Callable[..., Any]
    digest_line: Callable[..., Any]
    digest_task_index: Callable[[Any], TaskIndex]
    build_ng_perf: Callable[[dict[str, Any], float | None], dict[str, Any] | None]


def default_engines() -> Engines:
    """The real perf core and health pipeline."""
    from health.compact import compact_digest
    from health.digest import digest_line, digest_record
    from health.reduce import HealthReducer
    from sidecar.rollout_perf import DispatchLatencyTracker, PerfSummaryState, build_ng_perf

    def _record(record: dict[str, Any] | None, **kwargs: Any) -> Any:
        return compact_digest(digest_record(record, **kwargs))

    def _line(data: bytes, **kwargs: Any) -> Any:
        return compact_digest(digest_line(data, **kwargs))

    def _tracker(clock: Clock) -> TrackerLike:
        return DispatchLatencyTracker(clock=clock)

    def _task_index(digest: Any) -> TaskIndex:
        task: TaskIndex = digest.task_index
        return task

    return Engines(
        new_tracker=_tracker,
        new_reducer=lambda ignored: HealthReducer(ignored),
        new_perf_summary=PerfSummaryState,
        digest_record=_record,
        digest_line=_line,
        digest_task_index=_task_index,
        build_ng_perf=build_ng_perf,
    )
