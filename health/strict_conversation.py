"""Typed msgspec structs for the everyday conversation items, for the batch fast path.

The fast path keeps each invocation's ``conversation`` as a raw span (:mod:`health.strict_schema`).
:func:`everyday_conversation` decodes that span into a tagged union of the four everyday item
kinds (a text message, a function call, its output, a reasoning summary), each forbidding unknown
keys, so that msgspec's C decoder checks the types, the literals and the key sets that the
contract's everyday recogniser (``canonical_list_accepts``) checks in Python on plain dicts. What
it vouches for, that recogniser accepts too (and so does the contract); anything else (an item
without ``type``, token metadata, an unknown key or kind, a value of another type) makes it answer
``False``, and the caller decodes the span generically and checks it as before, which decides.

Duplicate keys: msgspec keeps a repeated field's last value, as orjson does, and checks every
occurrence of the tag key against the tag it routed by, so an item that names two kinds fails
the typed decode rather than disagreeing with orjson on which ``type`` wins
(``tests/health/test_strict_conversation.py`` pins that behaviour of the installed msgspec).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

__all__ = ["everyday_conversation"]

_Status = Literal["in_progress", "completed", "incomplete"]


class _InputText(Struct, tag_field="type", tag="input_text", forbid_unknown_fields=True, gc=False):
    text: str


class _OutputText(Struct, tag_field="type", tag="output_text", forbid_unknown_fields=True, gc=False):
    text: str
    annotations: Annotated[list[Raw], Meta(max_length=0)]
    logprobs: None = None


class _Refusal(Struct, tag_field="type", tag="refusal", forbid_unknown_fields=True, gc=False):
    refusal: str


class _Message(Struct, tag_field="type", tag="message", forbid_unknown_fields=True, gc=False):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[_InputText | _OutputText | _Refusal]
    phase: Literal["commentary", "final_answer"] | None = None
    id: str | UnsetType = UNSET
    status: _Status | UnsetType = UNSET


class _FunctionCall(Struct, tag_field="type", tag="function_call", forbid_unknown_fields=True, gc=False):
    arguments: str
    call_id: str
    name: str
    id: str | None = None
    status: _Status | None = None
    namespace: str | None = None


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


_DECODER = msgspec.json.Decoder(list[_Message | _FunctionCall | _FunctionCallOutput | _Reasoning])
_OUTPUT_PARTS = (_OutputText, _Refusal)


def _message_content_ok(message: _Message) -> bool:
    """The message rules the types do not express: which parts go with which role, and the
    fields an assistant's output message needs."""
    content = message.content
    if content.__class__ is str:
        return True
    if not content:
        return False
    if message.role == "assistant":
        if isinstance(content[0], _OUTPUT_PARTS):
            return message.id is not UNSET and all(isinstance(part, _OUTPUT_PARTS) for part in content)
    elif message.status is not UNSET:
        return False
    return all(part.__class__ is _InputText for part in content)


def everyday_conversation(span: Raw) -> bool:
    """True when ``span`` (a conversation's raw JSON, already validated as JSON) is a list of
    everyday items the contract accepts; ``False`` means undecided, never invalid."""
    try:
        items = _DECODER.decode(span)
    except (msgspec.DecodeError, RecursionError):  # another shape: the generic check decides
        return False
    return all(_message_content_ok(item) for item in items if isinstance(item, _Message))
