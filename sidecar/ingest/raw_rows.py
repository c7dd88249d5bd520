"""Rows kept as the bytes the client sent: the request is read once and a row is never rebuilt.

A completion's row is 10 KB to 1 MB of JSON, but the service reads only a handful of its
top-level keys (identity, disposition, an agent's own ``ng_perf``) plus what the health digest
and ``ng_perf`` read from ``ng_trajectory``. Building the whole row as Python objects costs
several times more than everything else the service does with it, so an ingest request is
decoded with every ``row`` left as a raw span (:func:`decode_request`), and the row travels
as a :class:`RawRow`: its exact bytes, with the few keys the service reads decoded on demand.
The content hash covers those bytes, the journal keeps them when a row must be journaled, and
the digest and ``ng_perf`` come from the batch check's fast path over them
(``health.digest.digest_everyday``). Anything else reads :meth:`RawRow.parsed`, the row as
orjson parses it, built at most once.

The raw path is taken only where it provably agrees with the full one: a body that
``health.json_vet`` vets (orjson accepts it, with the values msgspec decodes) and whose
events have no key the models forbid. Every other body takes the full path (orjson, then the
models), which decides and words every refusal exactly as before.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import orjson
from msgspec import UNSET, Raw, Struct, field

from health.json_vet import MAX_DEPTH, EventRows, vet, vet_event_rows
from sidecar.wire import ENVELOPE_FIELDS

__all__ = [
    "ROW_SERVICE_KEYS",
    "SHALLOW_ROW_DEPTH",
    "RawRow",
    "decode_request",
    "raw_line",
    "row_spans",
    "vetted_json",
]

#: Deepest record the batch fast path reads without checking its depth itself.
SHALLOW_ROW_DEPTH: Final = 257
#: A request body this shallow holds only shallow rows (each sits two levels down: list, event).
_SHALLOW_BODY_DEPTH: Final = SHALLOW_ROW_DEPTH + 2
_NULL = Raw(b"null")
_UNLEARNED: Final = object()


class _ServiceKeys(Struct):
    """The top-level keys of a row the service reads; every other key is skipped."""

    task_index: Any = field(default=UNSET, name="_ng_task_index")
    rollout_index: Any = field(default=UNSET, name="_ng_rollout_index")
    attempt: Any = field(default=UNSET, name="_ng_attempt_index")
    no_persist: Any = field(default=UNSET, name="_ng_no_persist")
    drained: Any = field(default=UNSET, name="_ng_dispatch_drained")
    failure_class: Any = field(default=UNSET, name="_ng_failure_class")
    terminal: Any = field(default=UNSET, name="_ng_failure_terminal")
    ng_perf: Any = field(default=UNSET, name="ng_perf")
    agent_ref: Any = field(default=UNSET, name="agent_ref")


#: Row key -> ``_ServiceKeys`` attribute: the keys :meth:`RawRow.get` answers without a full parse.
ROW_SERVICE_KEYS: Final = {
    "_ng_task_index": "task_index",
    "_ng_rollout_index": "rollout_index",
    "_ng_attempt_index": "attempt",
    "_ng_no_persist": "no_persist",
    "_ng_dispatch_drained": "drained",
    "_ng_failure_class": "failure_class",
    "_ng_failure_terminal": "terminal",
    "ng_perf": "ng_perf",
    "agent_ref": "agent_ref",
}
_KEYS_DECODER = msgspec.json.Decoder(_ServiceKeys)


class RawRow:
    """A row (a JSON object) as the bytes its client sent.

    ``vetted``: :func:`vetted_json` accepted the bytes, so msgspec reads the service keys with orjson's
    values; an unvetted row answers every key from the full parse. ``shallow``: vetted, and at
    most :data:`SHALLOW_ROW_DEPTH` levels deep (the batch fast path need not check again).
    """

    __slots__ = ("_keys", "_learned", "_parsed", "data", "shallow", "vetted")

    def __init__(
        self, data: bytes, *, vetted: bool, shallow: bool = False, parsed: dict[str, Any] | None = None
    ) -> None:
        self.data = data
        self.vetted = vetted
        self.shallow = vetted and shallow
        self._parsed = parsed
        self._keys: _ServiceKeys | None = None
        #: Service keys read by another decode of these same bytes (``UNSET``: absent).
        self._learned: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RawRow({len(self.data)} bytes)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RawRow):
            return self.parsed() == other.parsed()
        return isinstance(other, dict) and self.parsed() == other

    __hash__ = None  # type: ignore[assignment]

    def parsed(self) -> dict[str, Any]:
        """The row as orjson parses it (built once, on first use)."""
        if self._parsed is None:
            value = orjson.loads(self.data)
            if not isinstance(value, dict):  # only objects are ever wrapped
                raise TypeError(f"a raw row must be a JSON object, got {type(value).__name__}")
            self._parsed = value
        return self._parsed

    def _fast_keys(self) -> _ServiceKeys | None:
        """The service keys of the row (``UNSET``: absent), by msgspec (a vetted row), else
        ``None``: read the full parse."""
        keys = self._keys
        if keys is not None or not self.vetted:
            return keys
        try:
            keys = self._keys = _KEYS_DECODER.decode(self.data)
        except msgspec.DecodeError:  # cannot happen to vetted JSON; the full parse then decides
            self.vetted = self.shallow = False
            return None
        return keys

    def learn(self, values: dict[str, Any]) -> None:
        """Take service keys (row key -> value, ``UNSET`` for absent) that another msgspec
        decode of these very bytes read, such as the health fast path's: a vetted row then
        answers them without a pass of its own. (Any decode of vetted bytes reads orjson's
        values.) An unvetted row ignores them."""
        if self.vetted:
            self._learned = values

    def get(self, key: str, default: Any = None) -> Any:
        """``row.get(key, default)``, without a full parse for the keys the service reads."""
        learned = self._learned.get(key, _UNLEARNED)
        if learned is not _UNLEARNED:
            return default if learned is UNSET else learned
        name = ROW_SERVICE_KEYS.get(key)
        if name is not None and (keys := self._fast_keys()) is not None:
            value = getattr(keys, name)
            return default if value is UNSET else value
        return self.parsed().get(key, default)

    def __contains__(self, key: object) -> bool:
        learned = self._learned.get(key, _UNLEARNED) if isinstance(key, str) else _UNLEARNED
        if learned is not _UNLEARNED:
            return learned is not UNSET
        name = ROW_SERVICE_KEYS.get(key) if isinstance(key, str) else None
        if name is not None and (keys := self._fast_keys()) is not None:
            return getattr(keys, name) is not UNSET
        return key in self.parsed()


def vetted_json(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> bool:
    """True only if ``data`` is one JSON array or object nested at most ``max_depth`` (<= 1024)
    containers that orjson parses to the values msgspec decodes (:func:`health.json_vet.vet`;
    where only its simdjson fallback is installed, a text exactly ``max_depth`` deep may be
    refused, and the caller's exact check decides)."""
    return data[:1] in (b"[", b"{") and 1 <= max_depth <= MAX_DEPTH and vet(data, max_depth)


def _envelope(name: str, row: tuple[str, Any, Any]) -> type[Struct]:
    """A struct of every key any event may carry (:data:`sidecar.wire.ENVELOPE_FIELDS`),
    values left to the models, unknown keys refused; ``row`` is declared by the caller."""
    fields = [(key, Any, UNSET) if key != "row" else row for key in ENVELOPE_FIELDS]
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True)


#: Any event's keys; ``row`` kept as its raw span.
_Envelope = _envelope("_Envelope", ("row", Raw, field(default_factory=lambda: Raw(b""))))


class _Wrapped(Struct, forbid_unknown_fields=True):
    events: list[_Envelope]  # type: ignore[valid-type]


_REQUEST_DECODER = msgspec.json.Decoder(list[_Envelope] | _Wrapped)  # type: ignore[valid-type]


#: An event of a body whose rows were cut out (each ``row`` value is ``0``).
_Skeletal = _envelope("_Skeletal", ("row", Any, UNSET))


class _WrappedSkeletal(Struct, forbid_unknown_fields=True):
    events: list[_Skeletal]  # type: ignore[valid-type]


_SKELETON_DECODER = msgspec.json.Decoder(list[_Skeletal] | _WrappedSkeletal)  # type: ignore[valid-type]


def raw_line(data: bytes) -> RawRow | None:
    """A stripped line as a :class:`RawRow` when it is vetted JSON and an object, else ``None``."""
    if data[:1] != b"{":
        return None
    if vetted_json(data, SHALLOW_ROW_DEPTH):
        return RawRow(data, vetted=True, shallow=True)
    return RawRow(data, vetted=True) if vetted_json(data) else None


_ENVELOPE_FIELDS: Final = _Envelope.__struct_fields__


def _row_value(span: bytes, kind: Any, shallow: bool) -> Any:
    """A completion's object row as a :class:`RawRow`; a small failure/drain row, or a value
    the models refuse with their own words, parsed."""
    if span[:1] == b"{" and kind == "completed":
        return RawRow(span, vetted=True, shallow=shallow)
    return orjson.loads(span)


def _event_body(envelope: Any, shallow: bool) -> dict[str, Any]:
    body = {
        name: value
        for name, value in zip(_ENVELOPE_FIELDS, msgspec.structs.astuple(envelope), strict=True)
        if value is not UNSET
    }
    span = bytes(body.pop("row"))
    if span:
        body["row"] = _row_value(span, envelope.kind, shallow)
    return body


def _vetted(body: bytes | bytearray, max_depth: int) -> EventRows | bool:
    """:func:`health.json_vet.vet_event_rows` within :func:`vetted_json`'s bounds."""
    if body[:1] not in (b"[", b"{") or not 1 <= max_depth <= MAX_DEPTH:
        return False
    return vet_event_rows(body, max_depth)


def _from_skeleton(body: bytes | bytearray, rows: EventRows, shallow: bool) -> list[dict[str, Any]] | None:
    """The events of a vetted body from its skeleton (the body without its rows) and the rows'
    spans; ``None`` when the skeleton does not decode (the models word the refusal)."""
    skeleton, spans = rows
    try:
        decoded = _SKELETON_DECODER.decode(skeleton)
    except msgspec.DecodeError:
        return None
    skeletals = decoded.events if isinstance(decoded, _WrappedSkeletal) else decoded
    if len(skeletals) != len(spans):  # one span per event, always: anything else is not this shape
        return None
    events = []
    with memoryview(body) as view:
        for skeletal, (start, end) in zip(skeletals, spans, strict=True):
            event = {
                name: value
                for name, value in zip(_ENVELOPE_FIELDS, msgspec.structs.astuple(skeletal), strict=True)
                if value is not UNSET
            }
            if start >= 0:
                event["row"] = _row_value(bytes(view[start:end]), skeletal.kind, shallow)
            elif "row" in event:  # a row the pass did not cut: not the shape it reports
                return None
            events.append(event)
    return events


def decode_request(body: bytes | bytearray, max_depth: int) -> list[dict[str, Any]] | None:
    """The events of an ingest body (a JSON array, or ``{"events": [...]}``), each a dict for
    the event models with a completion's object ``row`` as a :class:`RawRow`; ``None`` when the
    body must take the full path (not vetted JSON within ``max_depth``, or a key the models
    forbid: they word the refusal).

    The vetting pass also cuts the rows out of an ordinary body, so msgspec decodes only the
    events' own keys and each row is one copy of its bytes; any other vetted body is decoded
    whole, each row kept as its raw span."""
    vetted = _vetted(body, _SHALLOW_BODY_DEPTH) if max_depth >= _SHALLOW_BODY_DEPTH else False
    shallow = vetted is not False
    if not shallow:
        vetted = _vetted(body, max_depth)
    if isinstance(vetted, tuple):
        return _from_skeleton(body, vetted, shallow)
    if not vetted:
        return None
    try:
        decoded = _REQUEST_DECODER.decode(body)
    except msgspec.DecodeError:
        return None
    envelopes = decoded.events if isinstance(decoded, _Wrapped) else decoded
    return [_event_body(envelope, shallow) for envelope in envelopes]


class _RowSpan(Struct):
    row: Raw = _NULL


_SPANS_DECODER = msgspec.json.Decoder(list[_RowSpan] | dict[str, list[_RowSpan]])


def row_spans(body: bytes | bytearray) -> list[bytes] | None:
    """Each event's ``row`` span as sent (``b"null"`` where absent), for a body the full path
    accepted; ``None`` if it cannot be read that way."""
    try:
        decoded = _SPANS_DECODER.decode(body)
    except msgspec.DecodeError:
        return None
    if isinstance(decoded, dict):
        if set(decoded) != {"events"}:
            return None
        decoded = decoded["events"]
    return [bytes(span.row) for span in decoded]
