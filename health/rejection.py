"""Definite rejections: a record whose ``ng_trajectory`` the contract surely refuses, without pydantic.

A fault-heavy run holds many records whose trajectory breaks the contract in one plain way (a
negative ``duration_ms``, an unknown token-stats key, a model server ref of another type). The
full path parses such a line with orjson and lets pydantic find the violation; the report only
says ``ValidationError``. This module reaches the same answer from the line's bytes, for lines
the caller has already shown to be JSON that orjson reads to the same values
(``health.fast_path``'s first step):

* **The values are orjson's.** A lenient msgspec mirror decodes the identity keys, the
  top-level ``response`` and the parts of the trajectory a witness reads. Nothing in it can
  fail on a value (``Any`` fields, no bounds, unknown keys ignored), and msgspec, like orjson,
  keeps the *last* value of a repeated key, so a witness read here is the value pydantic would
  validate. (The strict decode stops at the *first* bad value, so its error is never trusted.)
* **A witness proves a ValidationError.** Each witness is a value one field of
  ``TrajectoryModelCall`` refuses whatever else the trajectory holds; pydantic collects field
  errors, so the record fails with ``ValidationError``.
* **Nothing raises first.** Validation can end with another exception only where a conversation
  item's routing meets an unhashable value. So every conversation list must be one the
  contract's own everyday recognisers accept; otherwise the caller takes the full path.

Anything else (no witness, an odd shape, an unreadable identity) returns ``None``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, Struct, field

from .contract._conversation._fast import canonical_list_accepts, everyday_list_valid
from .strict_schema import StrictResponseMetadata, StrictTokenStats

__all__ = ["RejectedRecord", "read_rejected_record"]

# The strict mirror names the contract's fields without importing its pydantic models, which
# a worker builds only for the rare record that needs the full path.
_TOKEN_STATS_KEYS = frozenset(StrictTokenStats.__struct_fields__)
_RESPONSE_METADATA_KEYS = frozenset(StrictResponseMetadata.__struct_fields__)
_SERVER_REF_TYPE = "responses_api_models"


class _LenientCall(Struct):
    duration_ms: Any = None
    token_stats: Any = None
    response_metadata: Any = None


class _LenientTrajectory(Struct):
    rollout_id: Any = None
    invocations: Any = UNSET
    model_calls: list[_LenientCall] = []


class _LenientRecord(Struct):
    task_index: Any = field(default=UNSET, name="_ng_task_index")
    rollout_index: Any = field(default=UNSET, name="_ng_rollout_index")
    stage_index: Any = None
    rollout_id: Any = field(default=None, name="_ng_rollout_id")
    response: Any = None
    ng_trajectory: _LenientTrajectory | None = None


_DECODER = msgspec.json.Decoder(_LenientRecord)


class RejectedRecord(NamedTuple):
    """A record whose ``ng_trajectory`` the contract refuses with ``ValidationError``.

    The identity fields hold orjson's values, ``UNSET`` where the key is absent.
    """

    task_index: Any
    rollout_index: Any
    stage_index: Any
    rollout_id: Any
    trajectory_rollout_id: Any
    response: Any


def _negative_number(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and bool(value < 0)


def _call_refused(call: _LenientCall) -> bool:
    """True when one field of this ``model_calls`` item fails whatever the rest holds."""
    if _negative_number(call.duration_ms):
        return True
    stats = call.token_stats
    if isinstance(stats, dict) and (
        not _TOKEN_STATS_KEYS.issuperset(stats) or any(_negative_number(value) for value in stats.values())
    ):
        return True
    metadata = call.response_metadata
    if isinstance(metadata, dict):
        if not _RESPONSE_METADATA_KEYS.issuperset(metadata) or _negative_number(
            metadata.get("latency_ttft_ms")
        ):
            return True
        ref = metadata.get("model_ref")
        if isinstance(ref, dict) and ref.get("type") != _SERVER_REF_TYPE:
            return True
    return False


def _conversations_route_safely(invocations: Any) -> bool:
    """Every conversation list validates without raising (no unhashable item routing)."""
    if invocations is UNSET:
        return True
    if not isinstance(invocations, list):
        return False
    for invocation in invocations:
        if not isinstance(invocation, dict):
            return False
        conversation = invocation.get("conversation")
        if isinstance(conversation, list) and not (
            canonical_list_accepts(conversation) or everyday_list_valid(conversation)
        ):
            return False
    return True


def read_rejected_record(data: bytes | memoryview) -> RejectedRecord | None:
    """The record's identity and ``response`` if its trajectory surely fails validation, else ``None``.

    ``data`` must be a line already shown to be JSON orjson reads to the same values, at most
    257 levels deep (see ``health.fast_path``), or that line's payload-free copy
    (:func:`health.payload_spans.decode_strict_from_copy`): the witnesses never read the calls'
    ``request`` / ``response``, and of the top-level ``response`` only ``usage`` counts (the
    transcript usage), which the copy keeps.
    """
    try:
        record = _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    trajectory = record.ng_trajectory
    if trajectory is None or not any(_call_refused(call) for call in trajectory.model_calls):
        return None
    if not _conversations_route_safely(trajectory.invocations):
        return None
    return RejectedRecord(
        record.task_index,
        record.rollout_index,
        record.stage_index,
        record.rollout_id,
        trajectory.rollout_id,
        record.response,
    )
