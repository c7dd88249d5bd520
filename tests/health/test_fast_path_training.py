"""RL-style conversations (token metadata, ``"logprobs": []``) on the fast path.

``health.fast_path`` vouches for such conversations with ``everyday_list_valid`` instead of the
contract's pydantic item union. The invariants:

* ``digest_line`` (fast path first) equals the full path's digest on RL-style rows and on their
  mutations (a token key missing, wrong element types, ``routed_experts``, unknown keys, tokens on
  items without a training variant, wrong base fields, odd log-probs);
* the plain RL-style rows really take the fast path, without calling the union;
* whatever ``everyday_list_valid`` accepts, the contract accepts, and its canonical dump succeeds.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from health import fast_path
from health.contract._conversation._fast import canonical_list, everyday_list_valid
from health.contract.conversation import Conversation
from health.digest import Location, _digest_form, _digest_parsed, digest_line
from health.parse import parse_line
from health.types import RolloutDigest
from tests.sidecar.synthetic_support import SyntheticConfig, generate_rows

LOCATION = Location("run/rollouts.jsonl", 0, 5, 4)
TOKEN_KEYS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
CONVERSATION: TypeAdapter[list[Any]] = TypeAdapter(Conversation)


def encode(row: dict[str, Any]) -> bytes:
    """The row as a JSONL line (stdlib ``json``: orjson refuses the deeply nested values used here)."""
    return json.dumps(row, separators=(",", ":")).encode()


def full_path_digest(line: bytes) -> RolloutDigest:
    record, error = parse_line(line)
    walked = _digest_parsed(record, error, LOCATION, frozenset(), len(line), None)[0]
    return _digest_form(walked, LOCATION, frozenset())


def digest(line: bytes) -> RolloutDigest:
    source_path, source_index, line_number, ordinal = LOCATION
    return digest_line(
        line, source_path=source_path, source_index=source_index, line_number=line_number, ordinal=ordinal
    )


@functools.cache
def _synthetic_rows() -> tuple[dict[str, Any], ...]:
    config = SyntheticConfig(num_tasks=6, repeats_per_task=2, payload_bytes_per_call=64)
    rows = [row for row in generate_rows(config, 11) if isinstance(row.get("ng_trajectory"), dict)]
    assert rows
    return tuple(rows)


def _items(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        item
        for invocation in row["ng_trajectory"]["invocations"]
        for item in invocation["conversation"]
        if isinstance(item, dict)
    ]


def _tokens(rng: random.Random) -> dict[str, list[Any]]:
    generated = rng.randint(0, 12)
    return {
        "prompt_token_ids": [rng.randint(0, 150_000) for _ in range(rng.randint(0, 20))],
        "generation_token_ids": [rng.randint(0, 150_000) for _ in range(generated)],
        "generation_log_probs": [rng.choice([-rng.random() * 5, 0, -1]) for _ in range(generated)],
    }


def rl_style(row: dict[str, Any], seed: int, untyped_messages: bool = False) -> dict[str, Any]:
    """``row`` as an RL rollout writes it: token metadata on the generated items (assistant
    messages, function calls, reasoning), ``"logprobs": []`` on output text."""
    rng = random.Random(seed)
    row = copy.deepcopy(row)
    for item in _items(row):
        if item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning"):
            item.update(_tokens(rng))
        content = item.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    part["logprobs"] = []
        if untyped_messages and item.get("type") == "message":
            del item["type"]
    return row


def _rl_rows() -> list[dict[str, Any]]:
    rows = _synthetic_rows()
    return [rl_style(row, seed) for seed, row in enumerate(rows)] + [
        rl_style(row, seed, untyped_messages=True) for seed, row in enumerate(rows)
    ]


class _UnionSpy:
    def __init__(self, adapter: TypeAdapter[list[Any]]) -> None:
        self.adapter = adapter
        self.calls = 0

    def validate_python(self, value: Any) -> Any:
        self.calls += 1
        return self.adapter.validate_python(value)


def test_rl_style_rows_take_the_fast_path_without_the_union(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _UnionSpy(fast_path._conversation_adapter())
    monkeypatch.setattr(fast_path, "_conversation_adapter", lambda: spy)
    rows = _rl_rows()
    with_tokens = 0
    for row in rows:
        conversations = [inv["conversation"] for inv in row["ng_trajectory"]["invocations"]]
        with_tokens += any("prompt_token_ids" in item for item in _items(row))
        assert all(everyday_list_valid(conversation) for conversation in conversations)
        line = encode(row)
        assert fast_path.read_everyday_record(line) is not None
        assert digest(line) == full_path_digest(line)
    assert with_tokens == len(rows)
    assert spy.calls == 0


def test_everyday_list_valid_accepts_what_canonical_list_accepts() -> None:
    for row in _synthetic_rows():
        for invocation in row["ng_trajectory"]["invocations"]:
            conversation = invocation["conversation"]
            assert canonical_list(conversation) is not None
            assert everyday_list_valid(conversation)


def test_canonical_list_still_defers_rl_items() -> None:
    """The canonical dicts are unchanged: token-carrying items and empty log-probs still defer."""
    message: dict[str, Any] = {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "t", "annotations": []}],
    }
    assert canonical_list([message]) is not None
    empty = {**message, "content": [{**message["content"][0], "logprobs": []}]}
    assert canonical_list([empty]) is None
    tokens = {"prompt_token_ids": [1], "generation_token_ids": [2], "generation_log_probs": [-0.5]}
    assert canonical_list([{**message, **tokens}]) is None
    assert everyday_list_valid([{**message, **tokens}])
    assert everyday_list_valid([empty])


# --------------------------------------------------------------------------------------------
# Mutations


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _list_at(item: dict[str, Any], key: str) -> list[Any]:
    value = item.get(key)
    return list(value) if isinstance(value, list) else []


DEEP = _nested(300)
ODD_VALUES: list[Any] = [None, True, False, 0, 1, 1.5, "", "x", [], [1], {}, {"a": 1}, "bogus", DEEP]
BASE_FIELDS = (
    "type", "role", "content", "id", "status", "phase", "call_id", "name", "arguments",
    "summary", "encrypted_content", "namespace", "output",
)  # fmt: skip
BASE_VALUES: list[Any] = [
    *ODD_VALUES, "message", "function_call", "function_call_output", "reasoning", "user",
    "assistant", "tool", "completed", "commentary",
]  # fmt: skip
LOGPROBS: list[Any] = [
    None, [], "", "ab", {}, [1], [None],
    [{"token": "a", "bytes": [97], "logprob": -0.1, "top_logprobs": []}],
]  # fmt: skip


def _mutate(item: dict[str, Any], draw: st.DrawFn) -> None:
    kind = draw(
        st.sampled_from(
            [
                "drop_token_key",
                "bad_id_element",
                "bad_log_prob",
                "token_list_not_list",
                "routed_experts",
                "unknown_key",
                "add_tokens",
                "base_field",
                "drop_base_field",
                "logprobs",
                "part_extra",
            ]
        )
    )
    if kind == "drop_token_key":
        item.pop(draw(st.sampled_from(TOKEN_KEYS)), None)
    elif kind == "bad_id_element":
        key = draw(st.sampled_from(TOKEN_KEYS[:2]))
        item[key] = [*_list_at(item, key), draw(st.sampled_from([True, False, 1.0, 1.5, "1", None, [1], -1]))]
    elif kind == "bad_log_prob":
        value = draw(st.sampled_from([True, "x", None, [0.5], 3, -0.0, 1e300]))
        item["generation_log_probs"] = [*_list_at(item, "generation_log_probs"), value]
    elif kind == "token_list_not_list":
        item[draw(st.sampled_from(TOKEN_KEYS))] = draw(st.sampled_from([None, 1, "12", {"a": 1}]))
    elif kind == "routed_experts":
        item["routed_experts"] = draw(st.sampled_from([None, "x", [[[1, 2]]], [], [[["a"]]], 5]))
    elif kind == "unknown_key":
        key = draw(st.sampled_from(["zz", "extra", "annotations", "logprobs"]))
        item[key] = draw(st.sampled_from(ODD_VALUES))
    elif kind == "add_tokens":
        item.update(_tokens(random.Random(draw(st.integers(0, 1000)))))
    elif kind == "base_field":
        item[draw(st.sampled_from(BASE_FIELDS))] = draw(st.sampled_from(BASE_VALUES))
    elif kind == "drop_base_field":
        base = [key for key in item if key not in TOKEN_KEYS]
        if base:
            del item[draw(st.sampled_from(base))]
    else:
        content = item.get("content")
        parts = [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []
        if not parts:
            return
        part = draw(st.sampled_from(parts))
        if kind == "logprobs":
            part["logprobs"] = draw(st.sampled_from(LOGPROBS))
        else:
            key = draw(st.sampled_from(["zz", "annotations", "type", "text"]))
            part[key] = draw(st.sampled_from(ODD_VALUES))


@st.composite
def mutated_rl_rows(draw: st.DrawFn) -> dict[str, Any]:
    rows = _synthetic_rows()
    index = draw(st.integers(0, len(rows) - 1))
    row = rl_style(rows[index], index, untyped_messages=draw(st.booleans()))
    items = _items(row)
    for _ in range(draw(st.integers(1, 3))):
        _mutate(draw(st.sampled_from(items)), draw)
    return row


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_rl_rows())
def test_digest_line_matches_full_path_on_mutated_rl_rows(row: dict[str, Any]) -> None:
    line = encode(row)
    assert digest(line) == full_path_digest(line)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_rl_rows())
def test_what_everyday_list_valid_accepts_the_contract_accepts_and_dumps(row: dict[str, Any]) -> None:
    for invocation in row["ng_trajectory"]["invocations"]:
        conversation = invocation["conversation"]
        if everyday_list_valid(conversation):
            validated = CONVERSATION.validate_python(conversation)
            CONVERSATION.dump_python(validated, mode="json")


@pytest.mark.parametrize(
    ("change", "accepted"),
    [
        ({}, True),
        ({"generation_log_probs": [-1, -0.5]}, True),  # ints are valid log-probs
        ({"prompt_token_ids": [], "generation_token_ids": [], "generation_log_probs": []}, True),
        ({"prompt_token_ids": [True]}, False),
        ({"prompt_token_ids": [1.0]}, False),
        ({"generation_log_probs": [False]}, False),
        ({"routed_experts": None}, False),
        ({"zz": 1}, False),
        ({"status": "completed"}, True),
        ({"status": 5}, False),
    ],
)
def test_training_function_call(change: dict[str, Any], accepted: bool) -> None:
    item = {
        "type": "function_call",
        "call_id": "c",
        "name": "n",
        "arguments": "{}",
        "prompt_token_ids": [1, 2],
        "generation_token_ids": [3],
        "generation_log_probs": [-0.5],
        **change,
    }
    assert everyday_list_valid([item]) is accepted
    if accepted:
        CONVERSATION.validate_python([item])


def test_items_without_a_training_variant_defer() -> None:
    tokens = {"prompt_token_ids": [1], "generation_token_ids": [2], "generation_log_probs": [-0.5]}
    output = {"type": "function_call_output", "call_id": "c", "output": "o", **tokens}
    assert not everyday_list_valid([output])
    partial = {
        "type": "function_call",
        "call_id": "c",
        "name": "n",
        "arguments": "{}",
        "prompt_token_ids": [1],
    }
    assert not everyday_list_valid([partial])
