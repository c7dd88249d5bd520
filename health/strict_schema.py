"""A strict msgspec mirror of the ``ng_trajectory`` contract, for the batch fast path.

Validating a record with the pydantic contract (``health.contract``) costs about as much as
parsing it, and parsing builds every byte of the bulky ``request`` / ``response`` payloads
into Python objects that no check reads. This schema decodes the everyday record straight
from its bytes with msgspec, keeping those two payloads as raw JSON spans.

Free-form values that no check reads (a turn's ``question``, a tool call's ``output``) are
kept raw too: the contract accepts any JSON value there.

It is deliberately *stricter* than the contract and never decides a record is invalid: every
document it accepts, the contract accepts too, with the same values (JSON strings for
``str``, JSON integers for ``int``, integers or floats as ``float`` (pydantic turns both into a
float), ``true``/``false`` for ``bool``, the same defaults, unknown keys rejected where the
contract forbids them, the same ``>= 0`` / ``>= 1`` bounds and, in
:func:`contract_rules_hold`, the same model-level rules). Everything else (lax coercions such
as ``"3"`` for an integer, a malformed record, a rule broken) makes :func:`decode_strict`
return ``None`` and the caller goes through the contract, which decides.

Each invocation's conversation is decoded into typed everyday-item structs
(:mod:`health.strict_conversation`) where every item is one; a record with any other item is
decoded again with its conversations as plain JSON values, which the caller checks with the
contract's own code.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, field

from .strict_conversation import EverydayItem

__all__ = [
    "StrictModelCall",
    "StrictRecord",
    "StrictResponseUsage",
    "StrictTrajectory",
    "TypedRefusal",
    "contract_rules_hold",
    "decode_strict",
    "decode_strict_typed",
]

_NonNegativeFloat = Annotated[float, Meta(ge=0)] | None
_NonNegativeInt = Annotated[int, Meta(ge=0)] | None
_NULL = Raw(b"null")


class StrictServerRef(Struct):
    """``ModelServerRef``: unknown keys are dropped, as the contract drops them."""

    type: Literal["responses_api_models"]
    name: str


class StrictCallRef(Struct, forbid_unknown_fields=True):
    model_call_id: str | None = None
    model_ref: StrictServerRef | None = None
    response_id: str | None = None


class StrictTurn(Struct, forbid_unknown_fields=True):
    invocation_id: str
    task_id: str
    rollout_id: str
    turn_no: Annotated[int, Meta(ge=1)]
    timestamp: float
    step_count: Annotated[int, Meta(ge=0)]
    question: Raw = _NULL
    answer: Any = None
    reasoning_content: Any = None
    resolved: bool | None = None
    model_calls: list[StrictCallRef] = []


class StrictInvocation(Struct, forbid_unknown_fields=True):
    invocation_id: str
    kind: Literal["agent_invocation"] = "agent_invocation"
    parent_invocation_id: str | None = None
    spawned_by_tool_call_id: str | None = None
    status: Literal["completed", "failed", "incomplete", "unknown"] = "unknown"
    duration_ms: _NonNegativeFloat = None
    error_type: str | None = None
    model_calls: list[StrictCallRef] = []
    conversation: list[EverydayItem] = []
    """The items as typed everyday structs (:mod:`health.strict_conversation`), or as plain
    JSON values where :attr:`StrictRecord.typed_conversations` is false."""


class StrictResponseMetadata(Struct, forbid_unknown_fields=True):
    response_id: str | None = None
    model_ref: StrictServerRef | None = None
    model: str | None = None
    dialect: str | None = None
    status_code: int | None = None
    response_status: str | None = None
    finish_reason: str | None = None
    upstream_attempted: bool | None = None
    response_source: Literal["upstream", "local"] | None = None
    upstream_status_code: int | None = None
    local_response_reason: str | None = None
    error_category: str | None = None
    latency_ttft_ms: _NonNegativeFloat = None


class StrictTokenStats(Struct, forbid_unknown_fields=True):
    prompt_tokens: _NonNegativeInt = None
    completion_tokens: _NonNegativeInt = None
    reasoning_tokens: _NonNegativeInt = None
    total_tokens: _NonNegativeInt = None
    cached_tokens: _NonNegativeInt = None


class StrictModelCall(Struct, forbid_unknown_fields=True):
    """``TrajectoryModelCall`` with ``request`` / ``response`` left as raw JSON spans."""

    model_call_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: _NonNegativeFloat = None
    request: Raw = _NULL
    response: Raw = _NULL
    response_metadata: StrictResponseMetadata = field(default_factory=StrictResponseMetadata)
    token_stats: StrictTokenStats = field(default_factory=StrictTokenStats)


class StrictToolCall(Struct, forbid_unknown_fields=True):
    invocation_id: str
    tool_call_id: str
    kind: Literal["tool_call"] = "tool_call"
    sandbox_id: str | None = None
    tool_name: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: _NonNegativeFloat = None
    timing_source: Literal["executor", "artifact", "harness"] | None = None
    status: Literal["completed", "failed", "timeout", "cancelled", "incomplete", "unknown"] = "unknown"
    error_type: str | None = None
    output: Raw = _NULL


class StrictGap(Struct, forbid_unknown_fields=True):
    code: str
    invocation_id: str | None = None
    detail: str | None = None


class StrictTrajectory(Struct, forbid_unknown_fields=True):
    task_id: str
    rollout_id: str
    schema_version: Literal["1.0"] = "1.0"
    invocations: Sequence[StrictInvocation] = []
    turns: list[StrictTurn] = []
    model_calls: list[StrictModelCall] = []
    tool_calls: list[StrictToolCall] = []
    gaps: list[StrictGap] = []


class StrictResponseUsage(Struct):
    """A record's top-level ``response`` object, of which the checks read ``usage`` alone (its
    last value, as orjson keeps a repeated key's last value; ``None`` when absent)."""

    usage: Any = None


class StrictRecord(Struct):
    """The keys of a rollout record the health step reads; every other key is skipped.

    ``UNSET`` marks an absent identity key (absent and ``null`` differ for the task index).
    ``attempt``, ``no_persist`` and ``failure_class`` are read for the live service, which
    needs them to tell an everyday row and would otherwise pass over the row once more
    (they are scalars, or absent, in every row the collector writes); so is ``agent_ref`` (a
    small object naming the agent), which the live service counts per agent. No check reads it.
    """

    task_index: Any = field(default=UNSET, name="_ng_task_index")
    rollout_index: Any = field(default=UNSET, name="_ng_rollout_index")
    attempt: Any = field(default=UNSET, name="_ng_attempt_index")
    no_persist: Any = field(default=UNSET, name="_ng_no_persist")
    failure_class: Any = field(default=UNSET, name="_ng_failure_class")
    agent_ref: Any = UNSET
    stage_index: Any = None
    rollout_id: Any = field(default=None, name="_ng_rollout_id")
    response: StrictResponseUsage | None = None
    """The checks read only its ``usage``; a ``response`` that is neither an object nor ``null``
    falls outside the subset."""
    ng_trajectory: StrictTrajectory | None = None

    typed_conversations: ClassVar[bool] = True
    """Whether the conversations hold typed everyday items (else plain JSON values)."""


class _PlainInvocation(StrictInvocation, forbid_unknown_fields=True):
    conversation: list[Any] = []


class _PlainTrajectory(StrictTrajectory, forbid_unknown_fields=True):
    invocations: Sequence[_PlainInvocation] = []


class _PlainRecord(StrictRecord):
    ng_trajectory: _PlainTrajectory | None = None

    typed_conversations: ClassVar[bool] = False


_DECODER = msgspec.json.Decoder(StrictRecord)
_PLAIN_DECODER = msgspec.json.Decoder(_PlainRecord)
"""For a record with a conversation the everyday structs do not decode: items as JSON values."""
_CONVERSATION_FIELD = ".conversation"


def decode_strict(data: bytes | memoryview, *, typed_conversations: bool = True) -> StrictRecord | None:
    """The record, or ``None`` when it is not JSON or falls outside the strict subset.

    Conversations are decoded as typed everyday items where they all are; a record with any
    other conversation is decoded again with every conversation item as a plain JSON value,
    which ``typed_conversations=False`` does at once (for runs whose conversations mostly hold
    other items, such as messages without ``type``). Either way the same records decode, with
    the same values (:attr:`StrictRecord.typed_conversations` says which form came back).

    Skipped keys and raw spans are *not* fully validated here (msgspec checks their syntax,
    not their UTF-8 or number ranges): the caller must have validated the whole document.
    """
    if typed_conversations:
        found = decode_strict_typed(data)
        if found is not TypedRefusal.CONVERSATION:
            return None if found is TypedRefusal.OUTSIDE_SUBSET else found
    try:
        return _PLAIN_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


class TypedRefusal(enum.Enum):
    """Why :func:`decode_strict_typed` gave no record."""

    OUTSIDE_SUBSET = "outside_subset"
    """Not JSON, or a value outside the subset that is not inside a conversation: the plain
    decode, which differs only in conversations, stops at the same value."""
    CONVERSATION = "conversation"
    """The first value out of the typed subset is inside a conversation: the plain decode decides."""


def decode_strict_typed(data: bytes | memoryview) -> StrictRecord | TypedRefusal:
    """:func:`decode_strict`'s first decode, with conversations as typed everyday items: the
    record, or why there is none."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as error:
        return TypedRefusal.CONVERSATION if _CONVERSATION_FIELD in str(error) else TypedRefusal.OUTSIDE_SUBSET
    except (msgspec.DecodeError, RecursionError):
        return TypedRefusal.OUTSIDE_SUBSET


def contract_rules_hold(trajectory: StrictTrajectory) -> bool:
    """The contract's model validators: join keys, ordered tool times, unique ids, turn identity."""
    task_id = trajectory.task_id
    rollout_id = trajectory.rollout_id
    invocation_ids: set[str] = set()
    for invocation in trajectory.invocations:
        if invocation.invocation_id in invocation_ids or not _refs_joinable(invocation.model_calls):
            return False
        invocation_ids.add(invocation.invocation_id)
    call_ids: set[str] = set()
    for call in trajectory.model_calls:
        call_id = call.model_call_id
        if call_id:
            if call_id in call_ids:
                return False
            call_ids.add(call_id)
    turn_keys: set[tuple[str, int]] = set()
    for turn in trajectory.turns:
        key = (turn.invocation_id, turn.turn_no)
        if (
            turn.task_id != task_id
            or turn.rollout_id != rollout_id
            or key in turn_keys
            or not _refs_joinable(turn.model_calls)
        ):
            return False
        turn_keys.add(key)
    for tool_call in trajectory.tool_calls:
        started, completed = tool_call.started_at, tool_call.completed_at
        if started is not None and completed is not None and completed < started:
            return False
    return True


def _refs_joinable(refs: list[StrictCallRef]) -> bool:
    """``ModelCallRef``'s rule: a non-empty model_call_id, or a model_ref and a non-empty response_id."""
    for ref in refs:  # noqa: SIM110 - a loop costs less than all() over a generator here
        if not (ref.model_call_id or (ref.model_ref is not None and ref.response_id)):
            return False
    return True
