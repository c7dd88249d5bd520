"""The event contract's names, written once: each event kind, the fields it carries, the
latency ops and the per-event outcome statuses.

The service's pydantic models (:mod:`sidecar.events`) add the types and ranges and are checked
against :data:`EVENT_FIELDS` when they are defined (:func:`check_event_model`), so a field added
to a model but not here, or here but not to the model, stops the import naming that field. The
fast request decoder's envelope (:mod:`sidecar.raw_rows`) is built from :data:`ENVELOPE_FIELDS`,
the client's event builders (:mod:`dispatcher_client._events`) take their kinds and ops from
here, and ``/openapi.json`` comes from the models. Adding a field to an event is therefore two
edits side by side: its name in :data:`EVENT_FIELDS`, its type in the model.

Like :mod:`sidecar.wire` it stays light (the standard library only): ``dispatcher_client``
imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

__all__ = [
    "ENVELOPE_FIELDS",
    "EVENT_FIELDS",
    "EventKind",
    "EventSchemaDrift",
    "LatencyOp",
    "OutcomeStatus",
    "check_event_model",
]


class EventKind(StrEnum):
    """An event's ``kind``: which model validates it."""

    RUN_STARTED = "run_started"
    COMPLETED = "completed"
    FAILED = "failed"
    DRAINED = "drained"
    RUN_ENDED = "run_ended"
    LATENCY = "latency"
    STARTED = "started"
    HEARTBEAT = "heartbeat"


class LatencyOp(StrEnum):
    """A ``latency`` event's ``op``: the ``DispatchLatencyTracker`` method it replays."""

    RECORD = "record"
    RECORD_FAILURE = "record_failure"
    RECORD_DRAINED = "record_drained"


class OutcomeStatus(StrEnum):
    """What the service answers for one event of a batch.

    ``accepted``; ``duplicate`` (its idempotency key was stored before); ``unknown_run`` (no
    ``run_started`` yet); ``not_in_flight`` (a heartbeat of an attempt not in flight).
    """

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    UNKNOWN_RUN = "unknown_run"
    NOT_IN_FLIGHT = "not_in_flight"


_EVERY = ("kind", "generation")
#: The client-assigned identity (``source`` + ``seq``) and a rollout's own identity.
_ROLLOUT = (*_EVERY, "source", "seq", "task_index", "rollout_index", "attempt")

#: The fields each kind accepts (the models forbid every other key).
EVENT_FIELDS: Final[Mapping[EventKind, frozenset[str]]] = MappingProxyType(
    {
        EventKind.RUN_STARTED: frozenset(
            (
                *_EVERY,
                "plan",
                "materialized_inputs",
                "dispatch_budget_s",
                "drain_margin_s",
                "task_timeout_s",
                "max_attempts",
                "started_at",
                "source_path",
                "ignored_checks",
                "tracking",
            )
        ),
        EventKind.COMPLETED: frozenset((*_ROLLOUT, "seconds", "latency_ms", "row", "line", "line_number")),
        EventKind.FAILED: frozenset((*_ROLLOUT, "seconds", "row", "failure_class", "terminal")),
        EventKind.DRAINED: frozenset((*_ROLLOUT, "row")),
        EventKind.RUN_ENDED: frozenset((*_EVERY, "ended_at")),
        EventKind.LATENCY: frozenset((*_EVERY, "op", "seconds", "source", "seq")),
        EventKind.STARTED: frozenset((*_EVERY, "task_index", "rollout_index", "attempt")),
        EventKind.HEARTBEAT: frozenset((*_EVERY, "task_index", "rollout_index", "attempt")),
    }
)

#: Every key any event may carry, sorted: the fast decoder's envelope (it refuses the rest).
ENVELOPE_FIELDS: Final[tuple[str, ...]] = tuple(sorted(frozenset().union(*EVENT_FIELDS.values())))


class EventSchemaDrift(TypeError):
    """A model and :data:`EVENT_FIELDS` disagree; ``fields`` names the ones in one only."""

    def __init__(self, kind: str, missing: Iterable[str], extra: Iterable[str]) -> None:
        self.kind = kind
        self.missing = sorted(missing)
        self.extra = sorted(extra)
        parts = []
        if self.extra:
            parts.append(f"the model has {self.extra} that sidecar.event_schema.EVENT_FIELDS lacks")
        if self.missing:
            parts.append(f"EVENT_FIELDS lists {self.missing} that the model lacks")
        super().__init__(f"event kind {kind!r}: " + "; ".join(parts))


def check_event_model(kind: str, fields: Iterable[str]) -> None:
    """Raise :class:`EventSchemaDrift` unless ``fields`` (a model's) are exactly ``kind``'s."""
    try:
        expected = EVENT_FIELDS[EventKind(kind)]
    except ValueError:
        raise EventSchemaDrift(kind, (), ("kind",)) from None
    have = frozenset(fields)
    if have != expected:
        raise EventSchemaDrift(kind, expected - have, have - expected)
