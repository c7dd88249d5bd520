"""The ingest API's request models: one strict, closed pydantic model per event kind.

Unknown keys and out-of-range numbers are a 422 naming the field, so every sum the service keeps
stays finite; idempotency keys (:func:`idempotency_key`) make a retried delivery a duplicate.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from xxhash import xxh3_128_hexdigest

from health.json_vet import vet
from health.parse import parse_line
from health.registry import CHECK_IDS
from sidecar.export.trackers import MLFLOW_RUN_ID_PATTERN, WANDB_RUN_PATH_PATTERN
from sidecar.wire import (
    ATTEMPT_KEY,
    MAX_EVENT_SEQ,
    MAX_SOURCE_CHARS,
    ROLLOUT_KEY,
    TASK_KEY,
    EventKind,
    dump_row,
)

__all__ = [
    "EVENT_KINDS",
    "ITEM_SPANS",
    "MAX_COUNT",
    "MAX_EVENTS_PER_REQUEST",
    "MAX_LATENCY_MS",
    "MAX_NAME_CHARS",
    "MAX_REPEATS_PER_TASK",
    "MAX_SECONDS",
    "MAX_TIMESTAMP",
    "MEMBER_SPANS",
    "PIECE_BYTES",
    "Completed",
    "Drained",
    "Event",
    "EventBatch",
    "Failed",
    "Heartbeat",
    "Latency",
    "RowUnreadable",
    "RunEnded",
    "RunStarted",
    "RunTracking",
    "SentRow",
    "Started",
    "content_hash",
    "event_identity",
    "idempotency_key",
    "loads_in_pieces",
    "row_of",
]

#: Every event kind, in :class:`sidecar.wire.EventKind`'s order.
EVENT_KINDS = tuple(kind.value for kind in EventKind)
MAX_EVENTS_PER_REQUEST = 10_000

#: Longest duration any field accepts (about 116 days): longer than any allocation, and small
#: enough that sums over 10^12 samples stay finite and exact to well under a second.
MAX_SECONDS = 1e7
#: ``latency_ms``'s bound, the same span as :data:`MAX_SECONDS`.
MAX_LATENCY_MS = MAX_SECONDS * 1000.0
#: Latest Unix time ``started_at`` / ``ended_at`` accept (year 5138); the earliest is 0.
MAX_TIMESTAMP = 1e11
#: Largest counter a client may send (``attempt``, ``generation``, ``seq``, ``line_number``): int64.
MAX_COUNT = 2**63 - 1
#: Most repeats one plan task may declare; with the service's cap on plan tasks, a plan's total
#: stays far below 2**63.
MAX_REPEATS_PER_TASK = 1_000_000
#: Longest string a client may send as a name (check id, failure class, source, file name).
MAX_NAME_CHARS = 4096

Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
Milliseconds = Annotated[float, Field(ge=0.0, le=MAX_LATENCY_MS, allow_inf_nan=False)]
Timestamp = Annotated[float, Field(ge=0.0, le=MAX_TIMESTAMP, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Name = Annotated[StrictStr, Field(max_length=MAX_NAME_CHARS)]

Index = StrictInt | StrictStr


class _Event(BaseModel):
    """``generation`` (follower): a followed file was recreated or truncated, so a
    ``run_started`` of a higher generation resets the run and older generations are ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    generation: Count | None = None


class _Timed(_Event):
    """``at``: when it happened, Unix seconds by the sender's clock (``dispatcher_client`` stamps
    it; the follower never does, as a file holds no such time). Not part of the idempotency key."""

    at: Timestamp | None = None


class _Identified(_Timed):
    """``source`` names the sending client instance and ``seq`` numbers its events; together they
    are the event's identity (a retry repeats them). Give both or neither."""

    source: Annotated[StrictStr, Field(min_length=1, max_length=MAX_SOURCE_CHARS)] | None = None
    seq: Annotated[int, Field(ge=0, le=MAX_EVENT_SEQ)] | None = None

    @model_validator(mode="after")
    def _source_with_seq(self) -> _Identified:
        if (self.source is None) != (self.seq is None):
            raise ValueError("give both source and seq (the client-assigned event identity), or neither")
        return self


class RunTracking(BaseModel):
    """Existing MLflow / W&B runs the sidecar logs this run into (see docs/operations.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mlflow_run_id: Annotated[StrictStr, Field(pattern=MLFLOW_RUN_ID_PATTERN)] | None = None
    wandb_run_path: Annotated[StrictStr, Field(max_length=386, pattern=WANDB_RUN_PATH_PATTERN)] | None = None


class RunStarted(_Event):
    """A run begins. ``materialized_inputs`` becomes ``plan`` before journaling, so a replay never
    re-reads the file; ``source_path`` only appears in locators of unreadable records."""

    kind: Literal["run_started"]
    plan: dict[str, Annotated[int, Field(ge=1, le=MAX_REPEATS_PER_TASK)]] | None = None
    materialized_inputs: Name | None = None
    dispatch_budget_s: Seconds | None = None
    drain_margin_s: Seconds | None = None
    task_timeout_s: PositiveSeconds | None = None
    max_attempts: Annotated[int, Field(ge=1, le=1_000_000)] = 3
    started_at: Timestamp | None = None
    source_path: Name = "rollouts.jsonl"
    ignored_checks: list[Name] = Field(default_factory=list, max_length=len(CHECK_IDS) * 4)
    tracking: RunTracking | None = None

    @field_validator("ignored_checks")
    @classmethod
    def _known_checks(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(CHECK_IDS))
        if unknown:
            raise ValueError(f"unknown check id(s): {', '.join(unknown)}")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _one_plan_source(self) -> RunStarted:
        if self.plan is not None and self.materialized_inputs is not None:
            raise ValueError("give either plan or materialized_inputs, not both")
        return self


class SentRow:
    """A completion's row as the bytes its client sent (a JSON object), parsed only if read:
    where the health check's fast road vouches for the bytes, the row is never built as
    Python objects (most of a row's cost)."""

    __slots__ = ("_parsed", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._parsed: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"SentRow({len(self.data)} bytes)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SentRow) and self.data == other.data

    __hash__ = None  # type: ignore[assignment]

    def parsed(self) -> dict[str, Any]:
        """The row as orjson parses it (raises :class:`RowUnreadable` if it does not)."""
        if self._parsed is None:
            try:
                big = len(self.data) > PIECE_BYTES and vet(self.data)
                value = loads_in_pieces(memoryview(self.data)) if big else orjson.loads(self.data)
            except orjson.JSONDecodeError as exc:
                raise RowUnreadable(f"row is not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise RowUnreadable("row must be an object or null")
            self._parsed = value
        return self._parsed


PIECE_BYTES = 256 * 1024
"""Most JSON one C call parses or splits on ingest: each holds the interpreter lock the loop needs."""
MEMBER_SPANS = msgspec.json.Decoder(dict[str, msgspec.Raw])
"""An object's members, each value left as its span."""
ITEM_SPANS = msgspec.json.Decoder(list[msgspec.Raw])
"""An array's items, each left as its span."""


def loads_in_pieces(data: memoryview, piece_bytes: int = PIECE_BYTES) -> Any:
    """``orjson.loads(data)`` for a document :func:`health.json_vet.vet` passed, its large
    containers split by msgspec and their members parsed one by one: no call holds the
    interpreter lock for more than ~``piece_bytes`` of a row (a 3 MB row's one call held it ~5 ms)."""
    if len(data) <= piece_bytes or data[0] not in b"{[":
        return orjson.loads(data)
    if data[0] == ord("{"):
        members = MEMBER_SPANS.decode(data).items()
        return {key: loads_in_pieces(memoryview(span), piece_bytes) for key, span in members}
    return [loads_in_pieces(memoryview(span), piece_bytes) for span in ITEM_SPANS.decode(data)]


class RowUnreadable(ValueError):
    """A row sent as bytes that orjson does not read (the request is refused, nothing stored);
    ``index``: its event's place in the batch."""

    index = 0


def _sent_or_validated(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A :class:`SentRow` (only the service's request decoder makes one: JSON cannot) is the row
    as sent; anything else is validated as a row."""
    return value if isinstance(value, SentRow) else handler(value)


if TYPE_CHECKING:
    CompletedRow = dict[str, Any] | SentRow | None
else:  # the schema a client sees stays "an object or null"
    CompletedRow = Annotated[dict[str, Any] | None, WrapValidator(_sent_or_validated)]


class Completed(_Identified):
    """A rollout finished with its result row (or, from a follower, its raw line); identity
    defaults to the row's ``_ng_*`` fields, and no ``seconds`` feeds no latency sample."""

    kind: Literal["completed"]
    task_index: Index | None = None
    rollout_index: Index | None = None
    attempt: Count | None = None
    seconds: Seconds | None = None
    latency_ms: Milliseconds | None = None
    row: CompletedRow = None
    line: str | None = None
    line_number: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None

    @model_validator(mode="after")
    def _row_or_line(self) -> Completed:
        if (self.row is None) == (self.line is None):
            raise ValueError("give exactly one of row (the parsed result row) or line (its raw text)")
        if self.line is not None and not self.line.strip(" \t\n\r\x0b\x0c"):
            raise ValueError("line is blank; blank lines carry no rollout")
        return self

    @cached_property
    def parsed(self) -> tuple[dict[str, Any] | None, str | None]:
        """``(row, parse_error)``: the row as given, or the line parsed once, as the batch check
        parses a line (identity, ``ng_perf`` and the health digest all read this one parse)."""
        if self.line is None:
            return (self.row.parsed() if isinstance(self.row, SentRow) else self.row), None
        return parse_line(self.line.encode("utf-8", "surrogatepass"))

    @cached_property
    def identity(self) -> tuple[Any, Any, int]:
        """``event_identity(self)``, worked out once (the key, the fact and the in-flight
        registry all ask)."""
        return _identity(self)

    @cached_property
    def row_bytes(self) -> bytes | None:
        """The bytes its content hash covers: the line, the row as sent, or the row dumped once."""
        if self.line is not None:
            return self.line.encode("utf-8", "surrogatepass")
        if isinstance(self.row, SentRow):
            return self.row.data
        return None if self.row is None else dump_row(self.row)


class Failed(_Identified):
    """A dispatched attempt failed; ``row`` is the failure row the dispatcher wrote to the sidecar
    file, whose ``_ng_failure_*`` fields ``failure_class`` / ``terminal`` default to."""

    kind: Literal["failed"]
    task_index: Index | None = None
    rollout_index: Index | None = None
    attempt: Count | None = None
    seconds: Seconds | None = None
    row: dict[str, Any] = Field(default_factory=dict)
    failure_class: Name | None = None
    terminal: bool | None = None


class Drained(_Identified):
    """The dispatch budget never started this rollout (``record_drained``)."""

    kind: Literal["drained"]
    task_index: Index | None = None
    rollout_index: Index | None = None
    attempt: Count | None = None
    row: dict[str, Any] = Field(default_factory=dict)


class RunEnded(_Event):
    """The dispatcher finished; open tasks close and their task-level checks run."""

    kind: Literal["run_ended"]
    ended_at: Timestamp | None = None


class Latency(_Timed):
    """A latency sample without a rollout (``dispatcher_client.RemoteLatencyTracker``): it feeds
    only the tracker, never accounting or health; ``source`` + ``seq`` are its key."""

    kind: Literal["latency"]
    op: Literal["record", "record_failure", "record_drained"]
    seconds: Seconds | None = None
    source: StrictStr = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    seq: Annotated[int, Field(ge=0, le=MAX_EVENT_SEQ)]


class Started(_Timed):
    """A rollout attempt was dispatched: in flight until its completed/failed/drained event."""

    kind: Literal["started"]
    task_index: Index
    rollout_index: Index = 0
    attempt: Count = 0


class Heartbeat(_Event):
    """A sign of life of an in-flight attempt; kept in memory only, never journaled."""

    kind: Literal["heartbeat"]
    task_index: Index
    rollout_index: Index = 0
    attempt: Count = 0


Event = Annotated[
    RunStarted | Completed | Failed | Drained | RunEnded | Latency | Started | Heartbeat,
    Field(discriminator="kind"),
]
EventBatch: TypeAdapter[list[Event]] = TypeAdapter(
    Annotated[list[Event], Field(min_length=1, max_length=MAX_EVENTS_PER_REQUEST)]
)


def row_of(event: Completed | Failed | Drained) -> dict[str, Any] | None:  # (a sent row parsed)
    """The event's row; for a follower's raw line, the parsed line (``None`` if unreadable)."""
    return event.parsed[0] if isinstance(event, Completed) else event.row


def attempt_from(raw: Any) -> int:
    """An attempt number read from a row (``_ng_attempt_index``): what is not a count is 0."""
    if isinstance(raw, bool) or raw is None:
        return int(bool(raw))
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(value, 0)


def event_identity(event: Event) -> tuple[Any, Any, int]:
    """(task, rollout, attempt) of an event, raw values; run-level events give ``(None, None, 0)``."""
    if isinstance(event, Completed):
        return event.identity
    return _identity(event)


def _identity(event: Event) -> tuple[Any, Any, int]:
    if isinstance(event, RunStarted | RunEnded | Latency):
        return None, None, 0
    row = (row_of(event) if isinstance(event, Completed | Failed | Drained) else None) or {}
    task = event.task_index if event.task_index is not None else row.get(TASK_KEY)
    rollout = event.rollout_index if event.rollout_index is not None else row.get(ROLLOUT_KEY, 0)
    attempt = event.attempt if event.attempt is not None else attempt_from(row.get(ATTEMPT_KEY))
    return task, rollout, attempt


def _row_bytes(event: Event) -> bytes | None:
    """The bytes a completion's content hash covers (its line, or its row as sent)."""
    if isinstance(event, Completed):
        return event.row_bytes
    if isinstance(event, Failed | Drained):
        return dump_row(event.row)
    return None


def content_hash(data: bytes) -> str:
    """XXH3-128 of a row's bytes: fast, and wide enough that a collision is negligible (rows come
    from the run's own authenticated dispatcher, so it need not be cryptographic)."""
    return xxh3_128_hexdigest(data)


def _key(run_id: str, event: Event, content: bytes | None) -> str:
    suffix = f"|g{event.generation}" if event.generation else ""
    if isinstance(event, Latency):
        return f"{run_id}|latency:{event.source}||{event.seq}|{event.kind}{suffix}"
    if isinstance(event, RunStarted | RunEnded):
        return f"{run_id}|||0|{event.kind}{suffix}"
    if isinstance(event, _Identified) and event.source is not None:
        return f"{run_id}|@{event.source}|{event.seq}|{event.kind}{suffix}"
    task, rollout, attempt = event_identity(event)
    head = f"{run_id}|{orjson.dumps(task).decode()}|{orjson.dumps(rollout).decode()}|{attempt}|{event.kind}"
    if isinstance(event, Completed) and event.line_number is not None:
        head = f"{head}|L{event.line_number}"  # two identical physical lines are two records
    if isinstance(event, Completed) or task is None:
        if content is None:
            content = _row_bytes(event)
        return f"{head}|{content_hash(content or b'')}{suffix}"
    return f"{head}{suffix}"


def idempotency_key(run_id: str, event: Event) -> str:
    """``run|@source|seq|kind`` with a client identity, else ``run|task|rollout|attempt|kind`` plus
    the row's hash: a different row under one identity is a second record, as the batch check sees it."""
    return _key(run_id, event, None)
