"""A rollout line decoded straight from its bytes: the keys the per-record step reads.

Vetted by simdjson (:func:`health.json_vet.vet`, shallow enough that the canonical dump cannot
fail), then decoded by msgspec into :class:`LineRecord` with the free-form values nothing reads
kept as raw spans and the conversation's typed items as derived structs (its messages meet the
contract); a conversation outside those forms is decoded again for the contract to validate
whole. Whatever does not decode takes the step's full road.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec
import orjson
from msgspec import UNSET, Raw, Struct, field

from .checks import LENGTH_FINISH_REASONS
from .contract.models import TrajectoryRecord
from .contract.strict import derive
from .evidence import Evidence, build_evidence, usage_tokens
from .identity import (
    ROLLOUT_ID_KEY,
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    Identity,
    InvalidIdentity,
    identity_of,
)
from .json_vet import vet

__all__ = ["LineRecord", "Refusal", "decode_line", "line_dependence", "line_inputs"]

_MAX_LINE_DEPTH = 257
"""253 levels for a free-form value (the dump's limit) plus the 4 levels above the shallowest one."""
_RAW = frozenset({"request", "response", "question", "output"})
"""Free-form values no check (nor the live service) reads: kept as raw spans (the calls' payloads,
a turn's question, a tool call's output)."""
_NULL = Raw(b"null")
_NO_RECORD: dict[str, Any] = {}


class _Usage(Struct):
    """A record's top-level ``response``, of which the checks read ``usage`` alone."""

    usage: Any = None


class LineRecord(Struct):
    """The keys of a rollout line the step (and the live service) reads; the rest is skipped.
    ``UNSET`` marks an absent key (absent and ``null`` differ for the task index)."""

    task_index: Any = field(default=UNSET, name=TASK_INDEX_KEY)
    rollout_index: Any = field(default=UNSET, name=ROLLOUT_INDEX_KEY)
    rollout_id: Any = field(default=None, name=ROLLOUT_ID_KEY)
    stage_index: Any = None
    attempt: Any = field(default=UNSET, name="_ng_attempt_index")
    no_persist: Any = field(default=UNSET, name="_ng_no_persist")
    failure_class: Any = field(default=UNSET, name="_ng_failure_class")
    agent_ref: Any = UNSET
    response: _Usage | None = None
    ng_trajectory: derive(TrajectoryRecord, _RAW | {"conversation"}) | None = None  # type: ignore[valid-type]


class _ContractLine(LineRecord):
    """A line whose conversation holds an item outside the strict forms: the contract validates it."""

    ng_trajectory: derive(TrajectoryRecord, _RAW) | None = None  # type: ignore[valid-type]


_LINE_DECODER = msgspec.json.Decoder(LineRecord)
_CONTRACT_LINE_DECODER = msgspec.json.Decoder(_ContractLine)


class Refusal(enum.Enum):
    """Why :func:`decode_line` gave no record; the full road decides either way."""

    LINE = "line"
    TRAJECTORY = "trajectory"
    """The derived structs refused ``ng_trajectory``: the full road need not try them again."""


def _refusal(exc: msgspec.DecodeError) -> Refusal:
    trajectory = isinstance(exc, msgspec.ValidationError) and "`$.ng_trajectory" in str(exc)
    return Refusal.TRAJECTORY if trajectory else Refusal.LINE


def decode_line(data: bytes | memoryview) -> LineRecord | Refusal:
    """The fast road's record (module notes), or why the full road decides."""
    if data[:1] != b"{" or not vet(data, _MAX_LINE_DEPTH):
        return Refusal.LINE
    try:
        return _LINE_DECODER.decode(data)
    except msgspec.DecodeError as exc:  # where the path says the refusal is elsewhere, so would be this
        if ".invocations[" not in str(exc):
            return _refusal(exc)
    try:
        return _CONTRACT_LINE_DECODER.decode(data)
    except msgspec.DecodeError as exc:  # outside the strict subset, or the contract is broken: full road
        return _refusal(exc)


def line_inputs(line: LineRecord, ordinal: int) -> tuple[Identity, Evidence] | None:
    """The identity and evidence of a decoded line; ``None`` defers an invalid identity to
    the full road."""
    trajectory = line.ng_trajectory
    identity = identity_of(
        ordinal if line.task_index is UNSET else line.task_index,
        0 if line.rollout_index is UNSET else line.rollout_index,
        line.stage_index,
        line.rollout_id,
        None if trajectory is None else trajectory.rollout_id,
    )
    if isinstance(identity, InvalidIdentity):
        return None
    responses: list[Any] = []
    if trajectory is not None:
        for call in trajectory.model_calls:  # the checks read the responses cut at a length limit
            response = call.response
            if response == _NULL:
                responses.append(None)
            elif call.response_metadata.finish_reason in LENGTH_FINISH_REASONS:
                responses.append(orjson.loads(bytes(response)))
            else:
                responses.append(response)
    usage = (None, None) if line.response is None else usage_tokens(line.response.usage)
    return identity, build_evidence(trajectory, _NO_RECORD, responses, usage=usage)


def line_dependence(line: LineRecord) -> str | None:
    """For a line without ``_ng_task_index``: ``""`` where its own rollout id stands, else the
    raw rollout index its id derives from (``None``: it has a task index)."""
    if line.task_index is not UNSET:
        return None
    trajectory = line.ng_trajectory
    own_id = line.rollout_id or (None if trajectory is None else trajectory.rollout_id)
    return "" if own_id else f"{0 if line.rollout_index is UNSET else line.rollout_index}"
