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

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Literal, cast

from msgspec import UNSET, Meta, Raw, Struct, UnsetType
from msgspec import inspect as msgspec_inspect

__all__ = ["EverydayItem", "everyday_items_ok", "text_fields_free"]

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
        kind = item.__class__  # class tests: isinstance on a Struct class costs twice as much
        if kind is _FunctionCallOutput:
            continue
        if TYPE_CHECKING:  # what the class test says, for the type checker
            assert not isinstance(item, _FunctionCallOutput)
        training = item.prompt_token_ids is not UNSET
        if training:
            if item.generation_token_ids is UNSET or item.generation_log_probs is UNSET:
                return False
        elif item.generation_token_ids is not UNSET or item.generation_log_probs is not UNSET:
            return False
        if kind is _Message:
            message = cast(_Message, item)
            if (training or message.content.__class__ is not str) and not _message_content_ok(
                message, training
            ):
                return False
    return True


_CONTENT_BLIND = (
    msgspec_inspect.NoneType,
    msgspec_inspect.BoolType,
    msgspec_inspect.IntType,
    msgspec_inspect.FloatType,
    msgspec_inspect.ListType,
    msgspec_inspect.StructType,
)
"""Types whose acceptance of a JSON string does not depend on its text (they refuse any)."""


def _accepts_any_text(kind: msgspec_inspect.Type) -> bool:
    """Whether ``kind`` accepts or refuses every JSON string alike: a string without length or
    pattern constraints, or a union of such and of types that refuse strings."""
    if isinstance(kind, msgspec_inspect.UnionType):
        return all(map(_accepts_any_text, kind.types))
    if isinstance(kind, msgspec_inspect.StrType):
        return kind.min_length is None and kind.max_length is None and kind.pattern is None
    return isinstance(kind, _CONTENT_BLIND)


def _only_empty_raw(kind: msgspec_inspect.Type) -> bool:
    """Whether ``kind`` holds no raw or untyped value, but in lists that must be empty."""
    if isinstance(kind, msgspec_inspect.ListType):
        return kind.max_length == 0 or _only_empty_raw(kind.item_type)
    if isinstance(kind, msgspec_inspect.UnionType):
        return all(map(_only_empty_raw, kind.types))
    return not isinstance(kind, msgspec_inspect.RawType | msgspec_inspect.AnyType)


def text_fields_free(keys: Iterable[str]) -> bool:
    """Whether replacing any string under one of ``keys``, anywhere in a conversation, by
    another string leaves the typed decode's answer and everything read from it unchanged:
    every field of those names in :data:`EverydayItem` accepts any text alike, and no item keeps
    a raw or untyped value (which would hold the replaced text). The copy that elides those
    texts (:mod:`health.payload_spans`) is used only when this holds."""
    names = frozenset(keys)
    pending: list[msgspec_inspect.Type] = [msgspec_inspect.type_info(EverydayItem)]
    seen: set[type] = set()
    while pending:
        kind = pending.pop()
        if isinstance(kind, msgspec_inspect.UnionType):
            pending.extend(kind.types)
        elif isinstance(kind, msgspec_inspect.ListType):
            pending.append(kind.item_type)
        elif isinstance(kind, msgspec_inspect.StructType) and kind.cls not in seen:
            seen.add(kind.cls)
            for field in kind.fields:
                if field.encode_name in names and not _accepts_any_text(field.type):
                    return False
                if not _only_empty_raw(field.type):
                    return False
                pending.append(field.type)
    return True
