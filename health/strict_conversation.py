"""Typed msgspec structs for the everyday conversation items, for the batch fast path.

The strict decode (:mod:`health.strict_schema`) decodes each invocation's ``conversation``
into a tagged union of the four everyday item kinds (a text message, a function call, its
output, a reasoning summary), each forbidding unknown keys (:data:`EverydayItem`), so that
msgspec's C decoder checks the types, the literals and the key sets that the contract's
everyday recognisers (``everyday_list_valid``: the everyday shapes, with or without plain
token metadata, ``"logprobs": []`` on output text) check in Python on plain dicts. What they
vouch for, those recognisers accept too (and so does the contract); anything else (an item
without ``type``, ``routed_experts``, an unknown key or kind, a value of another type) fails
the decode or :func:`everyday_items_ok`, and the caller checks the items as plain JSON values,
which decides.

Duplicate keys: msgspec keeps a repeated field's last value, as orjson does, and checks every
occurrence of the tag key against the tag it routed by, so an item that names two kinds fails
the typed decode rather than disagreeing with orjson on which ``type`` wins
(``tests/health/test_strict_conversation.py`` pins that behaviour of the installed msgspec).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Raw, Struct, UnsetType

__all__ = ["EverydayItem", "everyday_items_ok"]

_Status = Literal["in_progress", "completed", "incomplete"]


class _InputText(Struct, tag_field="type", tag="input_text", forbid_unknown_fields=True, gc=False):
    text: str


_Empty = Annotated[list[Raw], Meta(max_length=0)]
_TokenIds = list[int] | UnsetType
_LogProbs = list[float] | UnsetType


class _OutputText(Struct, tag_field="type", tag="output_text", forbid_unknown_fields=True, gc=False):
    text: str
    annotations: _Empty
    logprobs: _Empty | None = None


class _Refusal(Struct, tag_field="type", tag="refusal", forbid_unknown_fields=True, gc=False):
    refusal: str


class _Message(Struct, tag_field="type", tag="message", forbid_unknown_fields=True, gc=False):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[_InputText | _OutputText | _Refusal]
    phase: Literal["commentary", "final_answer"] | None = None
    id: str | UnsetType = UNSET
    status: _Status | UnsetType = UNSET
    prompt_token_ids: _TokenIds = UNSET
    generation_token_ids: _TokenIds = UNSET
    generation_log_probs: _LogProbs = UNSET


class _FunctionCall(Struct, tag_field="type", tag="function_call", forbid_unknown_fields=True, gc=False):
    arguments: str
    call_id: str
    name: str
    id: str | None = None
    status: _Status | None = None
    namespace: str | None = None
    prompt_token_ids: _TokenIds = UNSET
    generation_token_ids: _TokenIds = UNSET
    generation_log_probs: _LogProbs = UNSET


class _FunctionCallOutput(
    Struct, tag_field="type", tag="function_call_output", forbid_unknown_fields=True, gc=False
):
    call_id: str
    output: str
    id: str | None = None
    status: _Status | None = None


class _SummaryText(Struct, forbid_unknown_fields=True, gc=False):
    type: Literal["summary_text"]
    text: str


class _ReasoningText(Struct, forbid_unknown_fields=True, gc=False):
    type: Literal["reasoning_text"]
    text: str


class _Reasoning(Struct, tag_field="type", tag="reasoning", forbid_unknown_fields=True, gc=False):
    id: str
    summary: list[_SummaryText]
    encrypted_content: str | None = None
    content: list[_ReasoningText] | None = None
    prompt_token_ids: _TokenIds = UNSET
    generation_token_ids: _TokenIds = UNSET
    generation_log_probs: _LogProbs = UNSET


EverydayItem = _Message | _FunctionCall | _FunctionCallOutput | _Reasoning
"""One everyday conversation item as the typed structs decode it (a tagged union on ``type``)."""

_OUTPUT_PARTS = (_OutputText, _Refusal)


def _message_content_ok(message: _Message, training: bool) -> bool:
    """The message rules the types do not express: which parts go with which role, the fields
    an assistant's output message needs, and (``training``: it carries token metadata) that
    it holds no ``id`` or ``status`` its training model lacks."""
    content = message.content
    bare = not training or (message.id is UNSET and message.status is UNSET)
    if content.__class__ is str:
        return bare
    if not content:
        return False
    if message.role == "assistant":
        if isinstance(content[0], _OUTPUT_PARTS):
            if message.id is UNSET:
                return False
            for part in content:  # noqa: SIM110 - a loop costs less than all() over a generator here
                if not isinstance(part, _OUTPUT_PARTS):
                    return False
            return True
    elif message.status is not UNSET:
        return False
    if not bare:
        return False
    for part in content:  # noqa: SIM110 - as above
        if part.__class__ is not _InputText:
            return False
    return True


def everyday_items_ok(items: list[EverydayItem]) -> bool:
    """True when the contract accepts these decoded items: token metadata comes as all three
    lists or none, and the message rules the types do not express hold; ``False`` means
    undecided, never invalid."""
    for item in items:
        if isinstance(item, _FunctionCallOutput):
            continue
        training = item.prompt_token_ids is not UNSET
        if (item.generation_token_ids is not UNSET) is not training or (
            item.generation_log_probs is not UNSET
        ) is not training:
            return False
        if isinstance(item, _Message) and not _message_content_ok(item, training):
            return False
    return True
