"""The computation a run composes, behind one injectable bundle.

The service never re-implements the perf core or the health pipeline: a run holds a
``DispatchLatencyTracker``, a perf-summary state and a ``HealthReducer`` and feeds them
through the functions gathered here. :func:`default_engines` wires the real modules;
tests may inject others (the style guide's "inject collaborators").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from health.compact import CompactDigest
from health.types import TaskIndex

if TYPE_CHECKING:
    pass

__all__ = [
    "BuildNgPerf",
    "Clock",
    "DigestRecord",
    "Engines",
    "Everyday",
    "default_engines",
]

Clock = Callable[[], float]


class Everyday(NamedTuple):
    """What the batch fast path reads from the bytes of a row it vouches for."""

    digest: CompactDigest
    ng_perf: dict[str, Any] | None
    #: The row's service keys read by the same decode: row key -> value, ``UNSET`` if absent.
    service_keys: dict[str, Any]
    #: Its ``ng_trajectory``'s turn ``timestamp``s and model-call ``completed_at``s, as written.
    times: list[float | None]








class DigestRecord(Protocol):
    """One parsed rollout row (``None`` with ``parse_error`` when unreadable) to its compact
    digest, located as the batch check locates it."""

    def __call__(
        self,
        record: dict[str, Any] | None,
        *,
        parse_error: str | None = None,
        source_path: str = "",
        source_index: int = 0,
        line_number: int = 0,
        ordinal: int = 0,
        ignored_checks: frozenset[str] = frozenset(),
    ) -> CompactDigest: ...


#: A completion's ``ng_perf`` from its row and the dispatcher's measured latency (ms).
BuildNgPerf = Callable[[dict[str, Any], float | None], dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Engines:
    """Factories and pure functions one run needs.

    ``digest_record`` returns a *compact* digest (what the reducer keeps);
    ``digest_task_index`` reads the coerced task index back from one.
    """

    digest_record: DigestRecord
    digest_task_index: Callable[[CompactDigest], TaskIndex]
    build_ng_perf: BuildNgPerf
    #: ``(data, latency_ms, **location)`` -> :class:`Everyday` of a row or line given as its
    #: bytes, for the rows the batch fast path vouches for; ``None``: use the two above.
    digest_everyday: Callable[..., Everyday | None] | None = None


class _LastTrajectory:
    """The most recent ``ng_trajectory`` validation of this engine bundle, used at most once more.

    The live service builds a completion's ``ng_perf`` and its health digest from the same row,
    one right after the other; both need the row's ``TrajectoryRecord``. Whichever comes first
    validates it and leaves the outcome here; the other takes it, if it is handed the very same
    ``ng_trajectory`` object, instead of validating again (results are identical: it is the same
    validation of the same unmodified value). One entry, consumed on use, replaced atomically:
    at worst a miss, which validates as before.
    """

    __slots__ = ("entry",)

    def __init__(self) -> None:
        self.entry: tuple[object, Any] | None = None

    def take(self, raw: object) -> Any:
        entry = self.entry
        if entry is None or entry[0] is not raw:
            return None
        self.entry = None
        return entry[1]

    def keep(self, raw: object, outcome: Any) -> None:
        self.entry = (raw, outcome)


def default_engines() -> Engines:
    """The real perf core and health pipeline."""
    from health.compact import compact_digest
    from health.contract import check_trajectory
    from health.digest import digest_everyday_compact, digest_record_with_trajectory
    from sidecar.perf import ng_perf_for_trajectory

    last = _LastTrajectory()

    def _record(
        record: dict[str, Any] | None,
        *,
        parse_error: str | None = None,
        source_path: str = "",
        source_index: int = 0,
        line_number: int = 0,
        ordinal: int = 0,
        ignored_checks: frozenset[str] = frozenset(),
    ) -> CompactDigest:
        raw = record.get("ng_trajectory") if isinstance(record, dict) else None
        checked = None if raw is None else last.take(raw)
        digest, outcome = digest_record_with_trajectory(
            record,
            parse_error=parse_error,
            source_path=source_path,
            source_index=source_index,
            line_number=line_number,
            ordinal=ordinal,
            ignored_checks=ignored_checks,
            checked=checked,
        )
        if outcome is not None and checked is None:
            last.keep(raw, outcome)
        return compact_digest(digest)

    def _ng_perf(result: dict[str, Any], rollout_latency_ms: float | None) -> dict[str, Any] | None:
        """``build_ng_perf``, sharing the row's trajectory validation with its digest."""
        raw = result.get("ng_trajectory")
        if not isinstance(raw, dict):
            return None
        outcome = last.take(raw)
        if outcome is None:
            outcome = check_trajectory(raw)
            last.keep(raw, outcome)
        trajectory = outcome[0]
        return None if trajectory is None else ng_perf_for_trajectory(trajectory, rollout_latency_ms)

    def _everyday(data: bytes, rollout_latency_ms: float | None, **location: Any) -> Everyday | None:
        """Digest and ``ng_perf`` from the row's bytes, the payloads never built (``health.fast_path``)."""
        vouched = digest_everyday_compact(data, **location)
        if vouched is None:
            return None
        compact, record = vouched
        trajectory = record.ng_trajectory
        # the strict mirror holds the fields ng_perf reads, with the values the contract gives them
        ng_perf = (
            None if trajectory is None else ng_perf_for_trajectory(cast(Any, trajectory), rollout_latency_ms)
        )
        service_keys = {
            "_ng_task_index": record.task_index,
            "_ng_rollout_index": record.rollout_index,
            "_ng_attempt_index": record.attempt,
            "_ng_no_persist": record.no_persist,
            "_ng_failure_class": record.failure_class,
            "agent_ref": record.agent_ref,
        }
        times: list[float | None] = []
        if trajectory is not None:
            times.extend(turn.timestamp for turn in trajectory.turns)
            times.extend(call.completed_at for call in trajectory.model_calls)
        return Everyday(compact, ng_perf, service_keys, times)

    def _task_index(digest: CompactDigest) -> TaskIndex:
        return digest.task_index

    return Engines(
        digest_record=_record,
        digest_task_index=_task_index,
        build_ng_perf=_ng_perf,
        digest_everyday=_everyday,
    )
