"""The journal's record format: the few hundred bytes each event contributes to its run.

Ingest derives these *facts* from a row (10 KB to 1 MB) before the commit and journals them, so a
replay applies exactly what the live service applied (docs/state.md); a row whose digest depends
on its position carries the row. Facts are MessagePack arrays ``[tag, *fields]`` stamped by
:data:`STATE_SCHEMA`.
"""

from __future__ import annotations

import hashlib
import json
from enum import IntEnum
from typing import Any

import msgspec
import orjson

from health.compact import (
    CAPTURE_OBSERVED,
    ENDED_ON_ERROR,
    POLICY_CALLS_OBSERVED,
    VERDICTS,
    CompactDigest,
)
from health.parse import parse_line
from health.registry import CHECK_IDS, ROLLOUT_CHECK_IDS, TASK_CHECK_IDS

#: Version of the facts' layout below; bump on any change of a fact's fields or their meaning.
FACTS_FORMAT = 5


class Disposition(IntEnum):
    """Where the collector writes a completion's row, hence what it feeds. A fact holds it as
    the plain int (the module constants below), so the journal's bytes are the code's."""

    #: The main rollouts file: health digest, perf summary, accounting success.
    DIGESTED = 0
    #: ``_ng_no_persist``: the tracker only.
    NOT_PERSISTED = 1
    #: ``_ng_no_persist`` + ``_ng_dispatch_drained``: a drained rollout.
    NOT_PERSISTED_DRAINED = 2
    #: ``_ng_failure_class``: the failure sidecar file, a failed attempt.
    FAILURE_ROW = 3


def _health_fingerprint() -> str:
    """A hash of what a journaled digest's meaning depends on: the registry's check ids in
    order (all, rollout, task), the verdict codes, the flag bits and the digest's fields."""
    flags = [CAPTURE_OBSERVED, POLICY_CALLS_OBSERVED, ENDED_ON_ERROR]
    layout = [CHECK_IDS, ROLLOUT_CHECK_IDS, TASK_CHECK_IDS, VERDICTS, flags, CompactDigest._fields]
    return hashlib.blake2b(orjson.dumps(layout), digest_size=8).hexdigest()


#: What a journal's facts and snapshots were made with: the facts' layout and the health
#: pipeline's (a journaled digest's bitmask and finding positions are registry positions, so
#: digests made by another registry must not be mixed in). A journal stamped otherwise is refused.
STATE_SCHEMA = f"facts-{FACTS_FORMAT}/health-{_health_fingerprint()}"


class FactError(ValueError):
    """A journal record that is not a fact this build can read; names the seq and the cause."""


class _Fact(msgspec.Struct, array_like=True):
    """A fact: a tagged MessagePack array, decoded only into these types."""


class RunStartedFact(_Fact, tag=1):
    received_at: float
    generation: int
    config: bytes
    """The validated ``run_started`` event as JSON (small; validated again when applied)."""
    plan: dict[str, int] | None
    """The plan derived from ``materialized_inputs`` at ingest (the file is never read again)."""


class CompletedFact(_Fact, tag=2):
    received_at: float
    generation: int
    seconds: float | None
    task: Any
    """Normalized task index of the event's identity (a digested row's task comes from its digest)."""
    rollout: Any
    disposition: int
    """A :class:`Disposition` (decoded from the journal as its plain int)."""
    failure_class: str
    """For ``FAILURE_ROW``: the exported failure-class label (``other`` for unknown classes)."""
    terminal: bool
    ng_perf: dict[str, Any] | None
    """``build_ng_perf`` of the row: the ack's ``ng_perf``."""
    agent_perf: dict[str, Any] | None
    """The row's own ``ng_perf`` object when none could be built (the perf summary takes it)."""
    digest: tuple[Any, ...] | None
    """The compact digest without its ordinal (stamped when applied); ``None``: see ``deferred``."""
    deferred: bytes | None
    """The row (or raw line) whose digest is position-dependent: digested when applied."""
    deferred_is_line: bool
    line_number: int | None
    row: bytes | None = None
    """The raw row, only with ``serve --keep-rows`` (never read back by the state)."""
    agent: str | None = None
    """The row's ``agent_ref.name`` (capped, :func:`sidecar.state.agents.agent_name`); ``None``: none."""
    at: float | None = None
    """When it happened (Unix seconds): the row's own evidence, else the sender's ``at``; ``None``:
    no time known (a row and event without one)."""

    def compact(self, ordinal: int) -> CompactDigest:
        """The journaled digest at input position ``ordinal``."""
        assert self.digest is not None
        if type(self.digest[6]) is tuple:  # derived in this process (digest_fields): the fields as they were
            return CompactDigest._make((ordinal, *self.digest))
        fields = list(self.digest)  # decoded from MessagePack: its arrays came back as lists
        fields[5] = _NO_FINDINGS if fields[5] == _NO_FINDINGS else fields[5]
        fields[6] = tuple(fields[6])
        fields[7] = fields[7] if isinstance(fields[7], int) else tuple(fields[7])
        fields[12] = tuple((status, count) for status, count in fields[12])
        return CompactDigest(ordinal, *fields)


class FailedFact(_Fact, tag=3):
    received_at: float
    generation: int
    seconds: float | None
    task: Any
    rollout: Any
    failure_class: str
    terminal: bool
    attempt: int
    """The failed attempt: it leaves the in-flight registry if it is the one registered there."""
    row: bytes | None = None
    agent: str | None = None
    """As ``CompletedFact.agent``: the failed row's agent, where it names one."""
    at: float | None = None


class DrainedFact(_Fact, tag=4):
    received_at: float
    generation: int
    task: Any
    rollout: Any
    attempt: int
    row: bytes | None = None
    at: float | None = None


class StartedFact(_Fact, tag=7):
    """An attempt was dispatched: its identity and (``received_at``) the start of its age."""

    received_at: float
    generation: int
    task: Any
    rollout: Any
    attempt: int
    at: float | None = None


class RunEndedFact(_Fact, tag=5):
    received_at: float
    generation: int
    ended_at: float
    at: float | None = None
    """The sender's ``ended_at`` (``None``: it stamped none, and ``ended_at`` is the arrival)."""


class LatencyFact(_Fact, tag=6):
    received_at: float
    generation: int
    op: str
    seconds: float | None
    at: float | None = None


Fact = RunStartedFact | CompletedFact | FailedFact | DrainedFact | RunEndedFact | LatencyFact | StartedFact

_NO_FINDINGS = b"[]"  # one shared object for the common case, as compact_digest makes it
_ENCODER = msgspec.msgpack.Encoder()
# MessagePack integers stop at 64 bits and its strings are UTF-8; a row's own values (token
# counts past 2**64, lone surrogates) may be neither: such values travel as extension types.
_EXT_WIDE_INT = 1
_EXT_SURROGATES = 2
_INT_RANGE = (-(2**63), 2**64 - 1)


def _from_ext(code: int, data: memoryview) -> Any:
    if code == _EXT_WIDE_INT:
        return int(bytes(data))
    if code == _EXT_SURROGATES:
        return bytes(data).decode("utf-8", "surrogatepass")
    raise msgspec.DecodeError(f"unknown extension type {code}")


_DECODER = msgspec.msgpack.Decoder(ext_hook=_from_ext)
_FACT_DECODER = msgspec.msgpack.Decoder(Fact, ext_hook=_from_ext)


def _portable(value: Any) -> Any:
    """``value`` with every integer past 64 bits and every string that is not valid UTF-8 as an
    extension value (dict keys stay as they are: a row's keys are plain strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            return value
        return msgspec.msgpack.Ext(_EXT_WIDE_INT, str(value).encode())
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return msgspec.msgpack.Ext(_EXT_SURROGATES, value.encode("utf-8", "surrogatepass"))
        return value
    if isinstance(value, dict):
        return {key: _portable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_portable(item) for item in value]
    return value


def digest_fields(digest: CompactDigest) -> tuple[Any, ...]:
    """A compact digest without its ordinal, as a completion fact holds it."""
    return tuple(digest[1:])


def pack(value: Any) -> bytes:
    """``value`` (plain data) as MessagePack; integers past 64 bits and lone surrogates (a row's own
    values, a hostile identity) go as extension values that :func:`unpack` reads back exactly."""
    try:
        return _ENCODER.encode(value)
    except (OverflowError, UnicodeEncodeError):
        return _ENCODER.encode(_portable(value))


def unpack(data: bytes) -> Any:
    """The plain value :func:`pack` wrote (raises ``msgspec.DecodeError`` if it is not one):
    only ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, lists and dicts are ever built."""
    return _DECODER.decode(data)


def encode_fact(fact: Fact) -> bytes:
    """``[tag, *fields]`` as MessagePack (see :func:`pack`)."""
    try:
        return _ENCODER.encode(fact)
    except (OverflowError, UnicodeEncodeError):
        return _ENCODER.encode(_portable([fact.__struct_config__.tag, *msgspec.structs.astuple(fact)]))


def decode_fact(payload: bytes, *, seq: int = 0) -> Fact:
    """The fact a record holds; raises :class:`FactError` naming ``seq`` if it is not one."""
    try:
        try:
            return _FACT_DECODER.decode(payload)
        except msgspec.ValidationError:  # an extension value (wide int, lone surrogate) in a str field
            fact: Fact = msgspec.convert(_DECODER.decode(payload), Fact)
            return fact
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FactError(f"journal record {seq}: not a fact of this build ({exc})") from exc


def parse_deferred(fact: CompletedFact) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, parse_error)`` of a deferred completion, exactly as the event parsed it."""
    assert fact.deferred is not None
    if fact.deferred_is_line:
        return parse_line(fact.deferred)
    try:
        return orjson.loads(fact.deferred), None
    except orjson.JSONDecodeError:  # deeper than orjson reads: written by the standard library
        return json.loads(fact.deferred), None
