"""What an event contributes to its run: its fact, derived once at ingest (pure), which
:class:`sidecar.state.run.RunState` applies live and on replay without reading the row again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from msgspec import UNSET

from sidecar.ingest.engines import Engines
from sidecar.ingest.events import (
    Completed,
    Drained,
    Event,
    Failed,
    Heartbeat,
    Latency,
    RunEnded,
    RunStarted,
    SentRow,
    Started,
    attempt_from,
    event_identity,
)
from sidecar.journal import (
    CompletedFact,
    Disposition,
    DrainedFact,
    Fact,
    FailedFact,
    LatencyFact,
    RunEndedFact,
    RunStartedFact,
    StartedFact,
    digest_fields,
)
from sidecar.state.accounting import RolloutKey, normalize_index
from sidecar.state.agents import agent_name
from sidecar.wire import TASK_KEY, dump_row

__all__ = ["FAILURE_CLASSES", "derive_fact", "latency_ms", "row_time"]

# A fact's disposition is journaled as the plain int of its :class:`Disposition`.
DIGESTED = int(Disposition.DIGESTED)
NOT_PERSISTED = int(Disposition.NOT_PERSISTED)
NOT_PERSISTED_DRAINED = int(Disposition.NOT_PERSISTED_DRAINED)
FAILURE_ROW = int(Disposition.FAILURE_ROW)

#: NeMo Gym's failure classes; anything else is exported as ``other`` to keep label values bounded.
FAILURE_CLASSES = frozenset(
    {
        "agent_request_failed",
        "agent_run_error",
        "environment_server_failed",
        "cancelled",
        "kill_shaped",
        "judge_invalid",
        "timeout_exceeded",
        "skipped",
        "reference_missing",
        "eval_missing",
        "transport_ineligible",
    }
)
_FAILURE_CLASS_KEY = "_ng_failure_class"
_TERMINAL_KEY = "_ng_failure_terminal"
_NO_PERSIST_KEY = "_ng_no_persist"
_DRAINED_KEY = "_ng_dispatch_drained"
_LINE_LOCATOR = b'"line":'
#: A row's own stamp counts as a time only from here on (2001-09-09): a smaller number is a
#: relative or monotonic clock (NeMo Gym's own test rows stamp turns ``101.0``), not a date.
_EPOCH_FLOOR = 1e9
#: And only up to this far past its arrival (clocks of two hosts disagree a little, not a day).
_FUTURE_S = 86_400.0


def row_time(times: Iterable[Any], received_at: float) -> float | None:
    """When a rollout ended by its own evidence: the latest of ``times`` (its ``ng_trajectory``'s
    turn ``timestamp``s and model-call ``completed_at``s) that reads as wall-clock Unix seconds,
    from 2001 to a day past the row's arrival; ``None`` when none does."""
    latest = None
    ceiling = received_at + _FUTURE_S
    for value in times:
        if type(value) in (int, float) and _EPOCH_FLOOR <= value <= ceiling:
            latest = value if latest is None or value > latest else latest
    return None if latest is None else float(latest)


def _trajectory_times(row: Any) -> list[Any]:
    """A parsed row's ``ng_trajectory`` turn ``timestamp``s and model-call ``completed_at``s."""
    trajectory = row.get("ng_trajectory") if isinstance(row, dict) else None
    if not isinstance(trajectory, dict):
        return []
    times: list[Any] = []
    for key, name in (("turns", "timestamp"), ("model_calls", "completed_at")):
        items = trajectory.get(key)
        if isinstance(items, list):
            times.extend(item.get(name) for item in items if isinstance(item, dict))
    return times


def latency_ms(event: Completed) -> float | None:
    """``ng_perf.total_latency_ms`` of a completion: ``latency_ms``, else ``seconds * 1000``, else none."""
    if event.latency_ms is not None:
        return event.latency_ms
    return None if event.seconds is None else event.seconds * 1000.0


def _failure_label(failure_class: Any) -> str:
    """The exported label of a failure class: known classes as-is, anything else ``other``."""
    return failure_class if isinstance(failure_class, str) and failure_class in FAILURE_CLASSES else "other"


def _identity_key(event: Completed | Failed | Drained | Started) -> RolloutKey:
    task, rollout, _ = event_identity(event)
    return normalize_index(task), normalize_index(rollout)


def _kept(event: Event, keep_rows: bool) -> bytes | None:
    if not keep_rows or not isinstance(event, Completed | Failed | Drained):
        return None
    return event.row_bytes if isinstance(event, Completed) else dump_row(event.row)


def derive_fact(
    event: Event,
    *,
    received_at: float,
    engines: Engines,
    settings: tuple[str, frozenset[str]] | None,
    plan: dict[str, int] | None = None,
    keep_rows: bool = False,
) -> Fact:
    """What ``event`` contributes to its run, computed once from its row (pure); without the run's
    ``settings`` (``(source_path, ignored_checks)``) the digest is left to :meth:`RunState.apply_fact`."""
    generation = event.generation or 0
    if isinstance(event, RunStarted):
        config = orjson.dumps(event.model_dump(exclude_none=True))
        return RunStartedFact(received_at, generation, config, plan)
    if isinstance(event, RunEnded):
        ended_at = event.ended_at if event.ended_at is not None else received_at
        return RunEndedFact(received_at, generation, ended_at, event.ended_at)
    if isinstance(event, Latency):
        return LatencyFact(received_at, generation, event.op, event.seconds, event.at)
    if isinstance(event, Heartbeat):
        raise TypeError("a heartbeat has no fact: it is applied in memory and never journaled")
    if isinstance(event, Completed):
        kept = _kept(event, keep_rows)
        fast = _from_bytes(event, received_at, generation, engines, settings, kept)
        if fast is not None:
            return fast
    task, rollout = _identity_key(event)
    if isinstance(event, Started):
        return StartedFact(received_at, generation, task, rollout, event.attempt, event.at)
    kept = _kept(event, keep_rows)
    attempt = event_identity(event)[2]
    if isinstance(event, Drained):
        return DrainedFact(received_at, generation, task, rollout, attempt, kept, event.at)
    if isinstance(event, Failed):
        row = event.row
        failure_class = (
            event.failure_class if event.failure_class is not None else row.get(_FAILURE_CLASS_KEY)
        )
        terminal = event.terminal if event.terminal is not None else bool(row.get(_TERMINAL_KEY))
        return FailedFact(
            received_at,
            generation,
            event.seconds,
            task,
            rollout,
            _failure_label(failure_class),
            terminal,
            attempt,
            kept,
            agent_name(row),
            _when(_trajectory_times(row), event, received_at),
        )
    return _completed_fact(event, received_at, generation, (task, rollout), engines, settings, kept)


def _when(times: Iterable[Any], event: Completed | Failed, received_at: float) -> float | None:
    """The fact's ``at``: the row's own evidence, else the time the sender stamped, else none."""
    own = row_time(times, received_at)
    return own if own is not None else event.at


def _from_bytes(
    event: Completed,
    received_at: float,
    generation: int,
    engines: Engines,
    settings: tuple[str, frozenset[str]] | None,
    kept: bytes | None,
) -> CompletedFact | None:
    """The fact of an everyday row (or line) straight from its bytes, where the health check's fast
    road vouches for them (no Python objects built); ``None``: the parsed row decides."""
    data = event.row_bytes if event.row is None or isinstance(event.row, SentRow) else None
    if data is None or settings is None:
        return None
    line_number = event.line_number if event.line_number is not None else 0
    location = {"source_path": settings[0], "source_index": 0, "line_number": line_number,
                "ordinal": 0, "ignored_checks": settings[1]}  # fmt: skip
    if event.line is not None:
        data = data.strip(b" \t\n\r\x0b\x0c")
    vouched = engines.digest_bytes(data, latency_ms(event), location)
    if vouched is None:
        return None
    digest, ng_perf, record = vouched
    trajectory = record.ng_trajectory
    if (
        record.task_index is UNSET  # its digest depends on its position: left to apply time
        or (record.no_persist is not UNSET and record.no_persist)
        or record.failure_class not in (UNSET, None)
        or trajectory is None
        or ng_perf is None
        or (event.line_number is None and _LINE_LOCATOR in digest.findings)
    ):
        return None
    task = event.task_index if event.task_index is not None else record.task_index
    rollout = event.rollout_index if event.rollout_index is not None else _present(record.rollout_index, 0)
    attempt = event.attempt if event.attempt is not None else attempt_from(_present(record.attempt, None))
    event.__dict__["identity"] = (task, rollout, attempt)  # (Completed.identity, worked out here)
    times = [turn.timestamp for turn in trajectory.turns] + [
        call.completed_at for call in trajectory.model_calls
    ]
    agent = agent_name({"agent_ref": _present(record.agent_ref, None)})
    return CompletedFact(
        received_at, generation, event.seconds, normalize_index(task), normalize_index(rollout),
        DIGESTED, "", False, ng_perf, None, digest_fields(digest), None, False, event.line_number,
        kept, agent, _when(times, event, received_at),
    )  # fmt: skip


def _present(value: Any, default: Any) -> Any:
    return default if value is UNSET else value


def _completed_fact(
    event: Completed,
    received_at: float,
    generation: int,
    key: RolloutKey,
    engines: Engines,
    settings: tuple[str, frozenset[str]] | None,
    kept: bytes | None,
) -> CompletedFact:
    base = (received_at, generation, event.seconds, key[0], key[1])
    row, parse_error = event.parsed
    agent = agent_name(row)
    at = _when(_trajectory_times(row), event, received_at)
    disposition, label, terminal = DIGESTED, "", False
    if row is not None and row.get(_NO_PERSIST_KEY):
        disposition = NOT_PERSISTED_DRAINED if row.get(_DRAINED_KEY) else NOT_PERSISTED
    elif row is not None and row.get(_FAILURE_CLASS_KEY) is not None:
        disposition, label = FAILURE_ROW, _failure_label(row.get(_FAILURE_CLASS_KEY))
        terminal = bool(row.get(_TERMINAL_KEY))
    located = (
        disposition == DIGESTED and settings is not None and not (row is not None and TASK_KEY not in row)
    )
    location = None
    if located:
        assert settings is not None
        line_number = event.line_number if event.line_number is not None else 0
        location = {"source_path": settings[0], "source_index": 0, "line_number": line_number,
                    "ordinal": 0, "ignored_checks": settings[1]}  # fmt: skip
    digest, ng_perf = (None, None)
    if row is not None or location is not None:
        digest, ng_perf = engines.digest_and_perf(row, parse_error, latency_ms(event), location)
    if disposition != DIGESTED:
        return CompletedFact(
            *base, disposition, label, terminal, ng_perf, None, None, None, False, None, kept, agent, at
        )
    agent_perf = _agent_perf(row) if ng_perf is None else None
    if digest is None or (event.line_number is None and _LINE_LOCATOR in digest.findings):
        # its identity or locator depends on the row's position: digested when applied
        deferred = event.row_bytes
        return CompletedFact(
            *base, DIGESTED, "", False, ng_perf, agent_perf, None,
            deferred, event.line is not None, event.line_number, kept, agent, at,
        )  # fmt: skip
    return CompletedFact(
        *base, DIGESTED, "", False, ng_perf, agent_perf, digest_fields(digest),
        None, False, event.line_number, kept, agent, at,
    )  # fmt: skip


def _agent_perf(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """The row's own ``ng_perf`` object, which ``attach_ng_perf`` keeps when it cannot build one."""
    value = None if row is None else row.get("ng_perf")
    return value if isinstance(value, dict) else None
