"""``health.strict_conversation``: what the typed everyday decode vouches for, the contract accepts.

The invariant: where a conversation's bytes decode as a list of :data:`EverydayItem` and
``everyday_items_ok`` holds, the contract's everyday recognisers (``everyday_list_valid``) and
its conversation validator accept the items orjson reads from the same bytes; a failed decode
or ``False`` is always allowed (the plain check then decides).
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from health.contract._conversation._fast import everyday_list_valid
from health.contract.conversation import Conversation
from health.strict_conversation import EverydayItem, everyday_items_ok
from tests.health.test_conversation import ACCEPTED, RAISES_TYPE_ERROR, REJECTED

_CONVERSATION = TypeAdapter(Conversation)

EVERYDAY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "hi"},
    {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "be brief"}]},
    {"type": "message", "role": "developer", "content": "x", "phase": "commentary"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "done", "annotations": []},
            {"type": "refusal", "refusal": "no"},
        ],
    },
    {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": None}],
    },
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "input_text", "text": "a"}],
        "status": "completed",
    },
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "f",
        "arguments": "{}",
        "id": None,
        "status": "in_progress",
        "namespace": "n",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "ok", "status": None},
    {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "t"}]},
    {
        "type": "reasoning",
        "id": "rs",
        "summary": [],
        "encrypted_content": "e",
        "content": [{"type": "reasoning_text", "text": "r"}],
    },
]


TOKENS: dict[str, Any] = {
    "prompt_token_ids": [1, 2],
    "generation_token_ids": [3],
    "generation_log_probs": [-0.5, 0],
}
TRAINING: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "hi", **TOKENS},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}], **TOKENS},
    {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}],
        **TOKENS,
    },
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", **TOKENS},
    {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "t"}], **TOKENS},
    {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}],
    },
]


def _accepted(items: Any) -> bool:
    try:
        _CONVERSATION.validate_python(items)
    except Exception:  # ValidationError, or TypeError while routing an unhashable type
        return False
    return True


_ITEMS = msgspec.json.Decoder(list[EverydayItem])


def everyday_conversation(span: bytes) -> bool:
    """The typed decode and its rules, as the strict decode applies them to a conversation."""
    try:
        items = _ITEMS.decode(span)
    except msgspec.DecodeError:
        return False
    return everyday_items_ok(items)


def assert_vouches_only_accepted(span: bytes) -> bool:
    """The invariant for one conversation's bytes; returns whether the typed decode vouched."""
    vouched = everyday_conversation(span)
    if vouched:
        items = orjson.loads(span)
        assert everyday_list_valid(items), span
        assert _accepted(items), span
    return vouched


def test_vouches_for_the_everyday_items() -> None:
    for item in EVERYDAY + TRAINING:
        assert assert_vouches_only_accepted(orjson.dumps([item])), item
    assert assert_vouches_only_accepted(orjson.dumps(EVERYDAY))
    assert assert_vouches_only_accepted(b"[]")


def test_the_contract_corpus() -> None:
    items = [item for item, _ in ACCEPTED] + list(REJECTED) + list(RAISES_TYPE_ERROR)
    vouched = sum(assert_vouches_only_accepted(orjson.dumps([item])) for item in items)
    assert vouched > 0


def test_undecided_shapes() -> None:
    undecided = [
        {"role": "user", "content": "no type key"},
        {"type": "message", "role": "user", "content": "x", "prompt_token_ids": [1]},
        {"type": "message", "role": "user", "content": "x", **TOKENS, "routed_experts": [[1]]},
        {"type": "message", "role": "user", "content": "x", "id": "m", **TOKENS},
        {"type": "message", "role": "assistant", "content": "x", "status": "completed", **TOKENS},
        {"type": "function_call_output", "call_id": "c", "output": "o", **TOKENS},
        {"type": "message", "role": "user", "content": "x", **{**TOKENS, "prompt_token_ids": [True]}},
        {"type": "message", "role": "user", "content": "x", **{**TOKENS, "generation_log_probs": ["x"]}},
        {"type": "message", "role": "user", "content": "x", "extra": 1},
        {"type": "message", "role": "user", "content": []},
        {
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "a"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "a", "annotations": []}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "output_text", "text": "a", "annotations": []}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "m",
            "content": [{"type": "output_text", "text": "a"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "m",
            "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": [0.5]}],
        },
        {"type": "message", "role": "tool", "content": "x"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}},
        {"type": "function_call_output", "call_id": "c", "output": ["x"]},
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "t", "x": 1}]},
        {"type": "mcp_call", "id": "x"},
    ]
    for item in undecided:
        assert not everyday_conversation(orjson.dumps([item])), item
    assert not everyday_conversation(b"null")
    assert not everyday_conversation(b'{"type": "message"}')


def test_a_repeated_type_key_never_picks_a_kind_orjson_would_not() -> None:
    """msgspec routes by a tag and checks every later occurrence against it; orjson keeps the
    last value. A span whose repeats disagree must therefore fail the typed decode."""
    disagreeing = [
        b'[{"type":"function_call","call_id":"c","name":"f","arguments":"{}","type":"function_call_output","output":"o"}]',
        b'[{"type":"message","role":"user","content":"x","type":"reasoning"}]',
        b'[{"type":"message","role":"user","content":[{"type":"input_text","text":"a","type":"output_text"}]}]',
        b'[{"type":"reasoning","id":"r","summary":[{"type":"summary_text","text":"a","type":"reasoning_text"}]}]',
    ]
    for span in disagreeing:
        assert not everyday_conversation(span), span
    agreeing = b'[{"type":"message","role":"user","content":"x","type":"message"}]'
    assert assert_vouches_only_accepted(agreeing)
    last_wins = b'[{"type":"message","role":"system","content":"x","role":"user"}]'
    assert assert_vouches_only_accepted(last_wins)


_KEYS = [
    "type", "role", "content", "phase", "id", "status", "arguments", "call_id", "name", "namespace",
    "output", "summary", "encrypted_content", "text", "annotations", "logprobs", "refusal",
    "prompt_token_ids", "generation_token_ids", "generation_log_probs", "routed_experts",
]  # fmt: skip
_SCALARS = st.sampled_from(
    [
        None, "", "x", "user", "assistant", "tool", "message", "function_call", "function_call_output",
        "reasoning", "input_text", "output_text", "refusal", "summary_text", "reasoning_text",
        "completed", "in_progress", "failed", "commentary", 0, 1.5, True, [], {}, [1, 2], [0.5, 1],
        [True], ["x"],
    ]
)  # fmt: skip


def _encoded(pairs: list[tuple[str, Any]]) -> bytes:
    """A JSON object written pair by pair, so that keys may repeat."""
    return b"{" + b",".join(orjson.dumps(key) + b":" + value for key, value in pairs) + b"}"


@st.composite
def _objects(draw: st.DrawFn, depth: int) -> bytes:
    base = draw(st.sampled_from(EVERYDAY + TRAINING))
    pairs = [(key, orjson.dumps(value)) for key, value in base.items()]
    for _ in range(draw(st.integers(0, 3))):
        edit = draw(st.integers(0, 2))
        if edit == 0 and pairs:
            pairs.pop(draw(st.integers(0, len(pairs) - 1)))
        else:
            key = draw(st.sampled_from(_KEYS))
            value = orjson.dumps(draw(_SCALARS))
            if depth and draw(st.booleans()):
                value = b"[" + b",".join(draw(st.lists(_objects(depth - 1), max_size=2))) + b"]"
            pairs.insert(draw(st.integers(0, len(pairs))), (key, value))
    return _encoded(pairs)


@settings(max_examples=400, deadline=None)
@given(st.lists(_objects(1), max_size=3))
def test_mutated_items_are_vouched_for_only_where_accepted(objects: list[bytes]) -> None:
    assert_vouches_only_accepted(b"[" + b",".join(objects) + b"]")
