"""What :meth:`sidecar.ingest.ingestor.Ingestor.submit` answers: one :class:`EventOutcome` per event, or a
refusal of the whole batch (nothing of it stored), each naming the value and the cap it passed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sidecar.http.responses import EventResult
from sidecar.ingest.events import Event
from sidecar.journal import Fact
from sidecar.state.accounting import identity_chars
from sidecar.wire import ROLLOUT_KEY, TASK_KEY, OutcomeStatus

__all__ = [
    "EventOutcome",
    "IdentityTooLong",
    "TooManyRuns",
    "UnknownRun",
    "check_identity",
]


class UnknownRun(LookupError):
    """Events for a run that was never started (and no ``run_started`` precedes them in the batch)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: post a run_started event first")


class TooManyRuns(Exception):
    """The batch would create a run while the service holds ``--max-runs`` runs (nothing stored)."""

    def __init__(self, held: int) -> None:
        super().__init__(
            f"the service holds {held} runs, its --max-runs cap; end runs (they are dropped after "
            "--retain-ended) or raise the cap"
        )
        self.held = held


class IdentityTooLong(ValueError):
    """An event's task or rollout identity (explicit, or read from its row or line) is longer than
    ``--max-identity-chars`` (nothing of the batch stored). ``field`` names where it came from."""

    def __init__(self, field: str, chars: int, cap: int) -> None:
        super().__init__(
            f"{field.rsplit('.', 1)[-1]} is {chars} characters, over the service's --max-identity-chars "
            f"cap of {cap}"
        )
        self.field = field


def _identity_field(index: int, event: Event, rollout: bool) -> str:
    """Where an event's identity came from, as the ``field`` of a refusal."""
    explicit = getattr(event, "rollout_index" if rollout else "task_index", None)
    if explicit is not None:
        return f"events.{index}.{'rollout_index' if rollout else 'task_index'}"
    source = "line" if getattr(event, "line", None) is not None else "row"
    return f"events.{index}.{source}.{ROLLOUT_KEY if rollout else TASK_KEY}"


def check_identity(index: int, event: Event, fact: Fact, cap: int) -> None:
    """Refuse an identity past ``cap`` characters, wherever it came from (the fact holds the
    normalized identity the event's fields, row or line gave)."""
    task = getattr(fact, "task", None)
    if task is None:
        return
    for rollout, value in ((False, task), (True, getattr(fact, "rollout", None))):
        if (type(value) is str and len(value) > cap) or (
            type(value) is int and (cap < 20 or value.bit_length() > 63) and identity_chars(value) > cap
        ):
            raise IdentityTooLong(_identity_field(index, event, rollout), identity_chars(value), cap)


class EventOutcome(NamedTuple):
    """What the service answers for one event of a batch (a tuple: one is built per row)."""

    status: OutcomeStatus
    kind: str
    seq: int | None = None
    ng_perf: dict[str, Any] | None = None

    def as_dict(self, index: int) -> EventResult:
        body: EventResult = {"index": index, "kind": self.kind, "status": self.status}
        if self.seq is not None:
            body["seq"] = self.seq
        if self.kind == "completed":
            body["ng_perf"] = self.ng_perf
        return body
