"""The API event dicts a dispatcher sends, built in one place for the async and sync clients.

Kinds, ops and field names follow :mod:`sidecar.wire` (the models of ``sidecar.ingest.events``
are checked against it); absent optional values are left out rather than sent as ``null`` so
an older sidecar's closed models still accept them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from sidecar.wire import EventKind, EventNumber, dump_row, row_identity, source_id

__all__ = [
    "completed_event",
    "drained_event",
    "encode_event",
    "failed_event",
    "identity",
    "latency_event",
    "progress_event",
    "run_ended_event",
    "run_started_event",
    "source_id",
]

#: Rows may carry numpy scalars or integer keys: encode them rather than fail the dispatcher.
_DUMP_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def identity(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The event identity fields present in a dispatched row (absent keys are left out)."""
    return row_identity(row)


def run_started_event(
    *,
    plan: Mapping[Any, int] | None,
    dispatch_budget_s: float | None,
    drain_margin_s: float | None,
    materialized_inputs: str | None,
    fields: Mapping[str, Any],
) -> dict[str, Any]:
    """``run_started``; the plan's task indices become strings, as the API's JSON object keys."""
    event: dict[str, Any] = {"kind": EventKind.RUN_STARTED.value, **fields}
    if plan is not None:
        event["plan"] = {str(task): repeats for task, repeats in plan.items()}
    if materialized_inputs is not None:
        event["materialized_inputs"] = materialized_inputs
    if dispatch_budget_s is not None:
        event["dispatch_budget_s"] = dispatch_budget_s
    if drain_margin_s is not None:
        event["drain_margin_s"] = drain_margin_s
    return event


def _numbered(event: dict[str, Any], number: EventNumber | None, at: float | None) -> dict[str, Any]:
    if number is not None:
        event["source"], event["seq"] = number
    if at is not None:
        event["at"] = at
    return event


def completed_event(
    row: Mapping[str, Any] | None,
    result: Mapping[str, Any],
    seconds: float,
    latency_ms: float | None,
    number: EventNumber | None = None,
    at: float | None = None,
) -> dict[str, Any]:
    """``number`` is the client-assigned identity ``(source, seq)``; ``None`` sends none (the
    sidecar then keys the event by its content). ``at``: when it happened (Unix seconds)."""
    event: dict[str, Any] = {
        "kind": EventKind.COMPLETED.value,
        **identity(row),
        "seconds": seconds,
        "row": result,
    }
    _numbered(event, number, at)
    if latency_ms is not None:
        event["latency_ms"] = latency_ms
    return event


def failed_event(
    row: Mapping[str, Any] | None,
    failure_row: Mapping[str, Any],
    seconds: float | None,
    number: EventNumber | None = None,
    at: float | None = None,
) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": EventKind.FAILED.value, **identity(row), "row": failure_row}
    _numbered(event, number, at)
    if seconds is not None:
        event["seconds"] = seconds
    return event


def drained_event(
    row: Mapping[str, Any] | None,
    result: Mapping[str, Any] | None,
    number: EventNumber | None = None,
    at: float | None = None,
) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": EventKind.DRAINED.value, **identity(row)}
    _numbered(event, number, at)
    if result is not None:
        event["row"] = result
    return event


def progress_event(
    kind: str, row: Mapping[str, Any] | None, at: float | None = None
) -> dict[str, Any] | None:
    """``started`` / ``heartbeat`` of a dispatched row; ``None`` when the row has no task index.
    ``at`` (when it started) only on a ``started`` (heartbeats are not kept)."""
    ids = identity(row)
    if "task_index" not in ids:
        return None
    return _numbered({"kind": kind, **ids}, None, at if kind == EventKind.STARTED else None)


def latency_event(
    op: str, seconds: float | None, source: str, seq: int, at: float | None = None
) -> dict[str, Any]:
    """``latency`` (a ``RemoteLatencyTracker`` call, ``op`` a ``LatencyOp``); ``seconds`` left
    out when unknown."""
    event: dict[str, Any] = {"kind": EventKind.LATENCY.value, "op": op, "source": source, "seq": seq}
    if seconds is not None:
        event["seconds"] = seconds
    return _numbered(event, None, at)


def run_ended_event(generation: int | None = None, ended_at: float | None = None) -> dict[str, Any]:
    """``run_ended`` (``generation``: a follower's; left out when ``None`` or 0; ``ended_at``:
    the sender's clock, left out when ``None``)."""
    event: dict[str, Any] = {"kind": EventKind.RUN_ENDED.value}
    if generation:
        event["generation"] = generation
    if ended_at is not None:
        event["ended_at"] = ended_at
    return event


def encode_event(event: Mapping[str, Any]) -> bytes:
    """JSON bytes of an event, however deep its row nests; raises ``orjson.JSONEncodeError``
    if it is not JSON at all."""
    return dump_row(event, _DUMP_OPTIONS)
