"""Generators of conversation items for the differential check in ``conversation_parity.py``.

Base items for every tag (with nested parts, actions, tool definitions), then: each field replaced by a
battery of values or removed, unknown keys added (also nested 300 deep), ``type`` removed, token metadata
complete / partial / badly typed, every optional field the reference's dump shows set to each battery
value, role/content/status/id routing grids, untyped shape grids, and seeded random multi-mutation items.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["BASES", "BATTERY", "TOKENS", "corpus", "deep", "random_items", "recombined_items"]

BATTERY: list[Any] = [
    None,
    "s",
    "",
    "12",
    "true",
    0,
    1,
    2,
    -1,
    1.5,
    True,
    False,
    [],
    {},
    ["s"],
    [1],
    [{}],
    {"a": 1},
]

MESSAGE_BASES: list[dict[str, Any]] = [
    {
        "type": "message",
        "role": "developer",
        "status": "in_progress",
        "content": [
            {"type": "input_video", "video": "v"},
            {"type": "input_image", "detail": "high", "file_id": "f"},
            {"type": "input_file", "file_url": "u", "detail": "low"},
        ],
    },
    {"type": "message", "role": "user", "content": "hi"},
    {"type": "message", "role": "system", "content": "be brief"},
    {"type": "message", "role": "developer", "content": "rules"},
    {"type": "message", "role": "assistant", "content": "hello"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "detail": "auto", "image_url": "u"}],
    },
    {"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": "f", "filename": "x"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_video", "video_url": "u"}]},
    {
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "a"}],
    },
    {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "a",
                "annotations": [],
                "logprobs": [
                    {
                        "token": "a",
                        "bytes": [97],
                        "logprob": -0.1,
                        "top_logprobs": [{"token": "a", "bytes": [97], "logprob": -0.1}],
                    }
                ],
            }
        ],
    },
    {"type": "message", "role": "assistant", "id": "m", "content": [{"type": "refusal", "refusal": "no"}]},
    {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "content": [
            {"type": "output_text", "text": "a", "annotations": []},
            {"type": "refusal", "refusal": "no"},
            {"type": "output_text", "text": "b", "annotations": []},
        ],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "a"},
            {"type": "input_image", "detail": "low"},
            {"type": "input_file", "file_data": "d"},
        ],
    },
    {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "content": [
            {
                "type": "output_text",
                "text": "a",
                "annotations": [
                    {"type": "file_citation", "file_id": "f", "filename": "n", "index": 0},
                    {"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1},
                    {
                        "type": "container_file_citation",
                        "container_id": "c",
                        "file_id": "f",
                        "filename": "n",
                        "start_index": 0,
                        "end_index": 1,
                    },
                    {"type": "file_path", "file_id": "f", "index": 0},
                ],
            }
        ],
    },
]

TOOL_BASES: list[dict[str, Any]] = [
    {
        "type": "function_call",
        "call_id": "c",
        "name": "n",
        "arguments": "{}",
        "id": "i",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "c", "output": "o"},
    {
        "type": "function_call_output",
        "call_id": "c",
        "output": [
            {"type": "input_text", "text": "t"},
            {"type": "input_image", "image_url": "u"},
            {"type": "input_file", "file_id": "f"},
        ],
    },
    {
        "type": "reasoning",
        "id": "r",
        "summary": [{"type": "summary_text", "text": "t"}],
        "content": [{"type": "reasoning_text", "text": "t"}],
        "encrypted_content": "e",
    },
    {"type": "custom_tool_call", "call_id": "c", "name": "n", "input": "x", "caller": {"type": "direct"}},
    {
        "type": "custom_tool_call",
        "call_id": "c",
        "name": "n",
        "input": "x",
        "caller": {"type": "program", "caller_id": "p"},
    },
    {"type": "custom_tool_call_output", "call_id": "c", "output": "o"},
    {
        "type": "custom_tool_call_output",
        "call_id": "c",
        "output": [
            {"type": "input_text", "text": "t"},
            {"type": "input_image", "detail": "auto"},
            {"type": "input_file"},
        ],
    },
    {
        "type": "mcp_call",
        "id": "i",
        "name": "n",
        "arguments": "{}",
        "server_label": "s",
        "output": "o",
        "error": {"type": "http_error", "code": 500, "message": "m"},
    },
    {
        "type": "mcp_call",
        "name": "n",
        "arguments": "{}",
        "error": {"type": "mcp_protocol_error", "code": 1, "message": "m"},
    },
    {
        "type": "mcp_call",
        "name": "n",
        "arguments": "{}",
        "error": {"type": "mcp_tool_execution_error", "content": []},
    },
    {"type": "mcp_list_tools", "id": "i", "server_label": "s", "tools": [{"name": "t", "input_schema": {}}]},
    {"type": "mcp_approval_request", "id": "i", "name": "n", "arguments": "{}", "server_label": "s"},
    {"type": "mcp_approval_response", "approval_request_id": "a", "approve": True, "reason": "r"},
]

BUILTIN_BASES: list[dict[str, Any]] = [
    {
        "type": "file_search_call",
        "id": "i",
        "queries": ["q"],
        "status": "completed",
        "results": [{"file_id": "f", "filename": "n", "score": 0.5, "text": "t", "attributes": {"k": "v"}}],
    },
    {
        "type": "web_search_call",
        "id": "i",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": "u"}]},
    },
    {
        "type": "web_search_call",
        "id": "i",
        "status": "completed",
        "action": {"type": "open_page", "url": "u"},
    },
    {
        "type": "web_search_call",
        "id": "i",
        "status": "completed",
        "action": {"type": "find_in_page", "url": "u", "pattern": "p"},
    },
    {
        "type": "computer_call",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "pending_safety_checks": [{"id": "s", "code": "c", "message": "m"}],
        "action": {"type": "click", "button": "left", "x": 1, "y": 2},
    },
    {
        "type": "computer_call",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "pending_safety_checks": [],
        "actions": [
            {"type": "double_click", "x": 1, "y": 2},
            {"type": "drag", "path": [{"x": 1, "y": 2}]},
            {"type": "keypress", "keys": ["a"]},
            {"type": "move", "x": 1, "y": 2},
            {"type": "screenshot"},
            {"type": "scroll", "x": 1, "y": 2, "scroll_x": 0, "scroll_y": 3},
            {"type": "type", "text": "t"},
            {"type": "wait"},
        ],
    },
    {
        "type": "computer_call_output",
        "call_id": "c",
        "output": {"type": "computer_screenshot", "image_url": "u"},
        "acknowledged_safety_checks": [{"id": "s"}],
    },
    {
        "type": "image_generation_call",
        "id": "i",
        "status": "completed",
        "result": "b64",
        "size": "1024x1024",
        "error": {"type": "e", "message": "m"},
    },
    {
        "type": "image_generation_call",
        "id": "i",
        "status": "completed",
        "svg_usage": {
            "input_tokens": 1,
            "output_tokens": 1,
            "reasoning_tokens": 0,
            "total_tokens": 2,
            "model": "m",
        },
    },
    {
        "type": "code_interpreter_call",
        "id": "i",
        "container_id": "c",
        "status": "completed",
        "code": "x",
        "outputs": [{"type": "logs", "logs": "l"}, {"type": "image", "url": "u"}],
    },
    {
        "type": "local_shell_call",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "action": {"type": "exec", "command": ["ls"], "env": {"A": "b"}, "timeout_ms": 5},
    },
    {"type": "local_shell_call_output", "id": "i", "output": "o", "status": "completed"},
    {
        "type": "apply_patch_call",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "operation": {"type": "create_file", "path": "p", "diff": "d"},
    },
    {
        "type": "apply_patch_call",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "operation": {"type": "update_file", "path": "p", "diff": "d"},
    },
    {"type": "apply_patch_call_output", "id": "i", "call_id": "c", "status": "failed", "output": "o"},
    {"type": "compaction", "id": "i", "encrypted_content": "e"},
    {
        "type": "shell_call",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "action": {"commands": ["ls"]},
        "environment": {"type": "container_reference", "container_id": "c"},
    },
    {
        "type": "shell_call_output",
        "id": "i",
        "call_id": "c",
        "status": "completed",
        "output": [
            {"stdout": "o", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}},
        ],
    },
    {
        "type": "tool_search_call",
        "id": "i",
        "arguments": {"q": 1},
        "execution": "server",
        "status": "completed",
    },
    {
        "type": "tool_search_output",
        "id": "i",
        "execution": "server",
        "status": "completed",
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
    },
    {"type": "compaction_trigger"},
    {"type": "additional_tools", "role": "developer", "tools": [{"type": "custom", "name": "c"}]},
]

TOOL_DEFS: list[dict[str, Any]] = [
    {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True, "description": "d"},
    {"type": "file_search", "vector_store_ids": ["v"], "max_num_results": 3},
    {"type": "computer"},
    {"type": "computer_use_preview", "display_height": 1, "display_width": 1, "environment": "linux"},
    {"type": "web_search", "search_context_size": "low"},
    {"type": "mcp", "server_label": "s", "server_url": "u", "headers": {"a": "b"}},
    {"type": "code_interpreter", "container": "c"},
    {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["f"]}},
    {"type": "programmatic_tool_calling"},
    {"type": "image_generation", "quality": "low"},
    {"type": "local_shell"},
    {"type": "shell"},
    {"type": "custom", "name": "c", "description": "d", "format": {"type": "text"}},
    {"type": "namespace", "description": "d", "name": "n", "tools": [{"type": "function", "name": "f"}]},
    {"type": "tool_search", "execution": "client"},
    {"type": "web_search_preview", "search_context_size": "high"},
    {"type": "apply_patch"},
]

BASES: tuple[dict[str, Any], ...] = (*MESSAGE_BASES, *TOOL_BASES, *BUILTIN_BASES)

TOKENS = {"prompt_token_ids": [1, 2], "generation_token_ids": [3], "generation_log_probs": [-0.5]}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield (*prefix, key)
            yield from _paths(sub, (*prefix, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value[:3]):
            yield (*prefix, index)
            yield from _paths(sub, (*prefix, index))


_DELETE = object()


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    cursor = out
    for step in path[:-1]:
        cursor = cursor[step]
    if new is _DELETE:
        del cursor[path[-1]]
    else:
        cursor[path[-1]] = new
    return out


def _containers(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        yield prefix
        for key, sub in value.items():
            yield from _containers(sub, (*prefix, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value[:3]):
            yield from _containers(sub, (*prefix, index))


def deep(levels: int) -> Any:
    """``levels`` nested lists around ``0``."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _mutants(base: dict[str, Any]) -> Iterator[Any]:
    yield base
    for path in _paths(base):
        for new in [_DELETE, *BATTERY]:
            yield _replace(base, path, new)
    for path in _containers(base):
        yield _replace(base, (*path, "zz_extra"), 1)
        yield _replace(base, (*path, "zz_extra"), deep(300))
    untyped = {k: v for k, v in base.items() if k != "type"}
    yield untyped
    for path in _paths(untyped):
        for new in [_DELETE, None, 5, "s", []]:
            yield _replace(untyped, path, new)
    yield {**base, **TOKENS}
    for key in TOKENS:
        yield {**base, **{k: v for k, v in TOKENS.items() if k != key}}
        yield {**base, key: TOKENS[key]}
        for new in [None, [1.5], ["1"], [True], "s"]:
            yield {**base, **TOKENS, key: new}
    yield {**base, **TOKENS, "routed_experts": [[1]]}
    yield {**base, **TOKENS, "routed_experts": "s"}


def _routing_cases() -> Iterator[Any]:
    out_part = {"type": "output_text", "text": "a", "annotations": []}
    in_part = {"type": "input_text", "text": "a"}
    for kind in ("message", None, "__absent__"):
        for role in (
            "user",
            "assistant",
            "system",
            "developer",
            "tool",
            "zzz",
            None,
            1,
            "__absent__",
            [],
            {},
        ):
            for content in (
                "x",
                [],
                [out_part],
                [in_part],
                [in_part, out_part],
                [out_part, in_part],
                [{"type": "refusal", "refusal": "r"}],
                [{}],
                ["s"],
                [[]],
                [{"type": []}],
                [{"type": ["s"]}],
                [{"refusal": "r"}],
                [{"type": None, "refusal": "r"}],
                None,
                5,
                "__absent__",
            ):
                for extra in (
                    {},
                    {"id": "m"},
                    {"id": ""},
                    {"id": 5},
                    {"id": None},
                    {"status": "completed"},
                    {"status": "in_progress"},
                    {"status": "zzz"},
                    {"status": None},
                    {"status": []},
                    {"id": "m", "status": "incomplete"},
                    {"id": "m", "status": "zzz"},
                ):
                    item: dict[str, Any] = {}
                    if kind != "__absent__":
                        item["type"] = kind
                    if role != "__absent__":
                        item["role"] = role
                    if content != "__absent__":
                        item["content"] = content
                    item.update(extra)
                    yield item


def _shape_cases() -> Iterator[Any]:
    keys = {
        "call_id": ["c", 5],
        "output": ["o", 5],
        "name": ["n", 5],
        "arguments": ["{}", 5],
        "id": ["i", 5],
        "summary": [[], 5],
        "input": ["x"],
        "role": ["user", "assistant"],
        "content": ["x", []],
        "tools": [[], 5],
        "status": ["completed"],
    }
    names = list(keys)
    for i, first in enumerate(names):
        for second in names[i:]:
            for v1 in keys[first]:
                for v2 in keys[second]:
                    yield {first: v1, second: v2}
                    for third in ("call_id", "name", "id"):
                        yield {first: v1, second: v2, third: keys[third][0]}
    for extra in ({"async": True}, {"async": "zz"}, {"async": None}, {"async_": [[1]]}):
        yield {"type": "custom_tool_call", "call_id": "c", "name": "n", "input": "x", **extra}
        for tool in ({"type": "function", "name": "f"}, {"type": "custom", "name": "c"}):
            yield {"type": "additional_tools", "role": "developer", "tools": [{**tool, **extra}]}
    untyped_items: list[dict[str, Any]] = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [], "id": "m"},
        {"call_id": "c", "name": "n", "arguments": "{}"},
        {"id": "r", "summary": []},
        {"foo": 1},
    ]
    for untyped in untyped_items:
        yield {**untyped, **TOKENS}
        yield {**untyped, "prompt_token_ids": [1]}
        yield {**untyped, **TOKENS, "routed_experts": [[[1]]]}
    yield from [
        "hi",
        5,
        None,
        [],
        True,
        1.5,
        {"type": 5},
        {"type": []},
        {"type": {}},
        {"type": "zzz"},
        {"type": ""},
        {"type": "MESSAGE"},
        {"type": None},
        {},
    ]


def _optional_mutants(base: dict[str, Any], dumped: Any) -> Iterator[Any]:
    """Every optional field the reference's dump shows but the base omits, set to each battery value."""

    def walk(raw: Any, canonical: Any, path: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        if isinstance(raw, dict) and isinstance(canonical, dict):
            for key, value in canonical.items():
                if key not in raw:
                    yield (*path, key)
                else:
                    yield from walk(raw[key], value, (*path, key))
        elif isinstance(raw, list) and isinstance(canonical, list):
            for index, (sub, value) in enumerate(zip(raw[:3], canonical, strict=False)):
                yield from walk(sub, value, (*path, index))

    for path in walk(base, dumped, ()):
        for new in BATTERY:
            yield _replace(base, path, new)


_VOCAB = [
    "type",
    "role",
    "content",
    "status",
    "id",
    "call_id",
    "name",
    "arguments",
    "output",
    "summary",
    "text",
    "phase",
    "input",
    "refusal",
    "annotations",
    "tools",
    "server_label",
    "error",
    "encrypted_content",
]
_VALUES: list[Any] = [*BATTERY, "message", "assistant", "user", "output_text", "input_text", "refusal",
                      "function_call", "reasoning", "completed", "summary_text", [{"type": "output_text"}],
                      [{"type": "input_text", "text": "t"}], [{"refusal": "r"}]]  # fmt: skip


def random_items(count: int, seed: int = 1) -> list[Any]:
    """Multi-mutation variants of the bases and random objects over the item vocabulary."""
    rng = random.Random(seed)
    bases = MESSAGE_BASES + TOOL_BASES + BUILTIN_BASES
    out: list[Any] = []
    for _ in range(count // 2):
        item: Any = copy.deepcopy(rng.choice(bases))
        for _ in range(rng.randint(2, 4)):
            paths = list(_paths(item))
            if not paths:
                break
            path = rng.choice(paths)
            choice = rng.random()
            if choice < 0.2:
                item = _replace(item, path, _DELETE)
            elif choice < 0.3 and isinstance(item, dict):
                item.pop("type", None)
            else:
                item = _replace(item, path, copy.deepcopy(rng.choice(_VALUES)))
        out.append(item)
    for _ in range(count - count // 2):
        keys = rng.sample(_VOCAB, rng.randint(1, 5))
        out.append({key: copy.deepcopy(rng.choice(_VALUES)) for key in keys})
    return out


def corpus(dump_bases: Callable[[list[dict[str, Any]]], list[Any]]) -> list[Any]:
    """The structured corpus; ``dump_bases`` gives the reference's canonical dump of each base."""
    items: list[Any] = []
    bases: list[dict[str, Any]] = list(MESSAGE_BASES + TOOL_BASES + BUILTIN_BASES)
    for tool in TOOL_DEFS:
        for holder in (
            {"type": "additional_tools", "role": "developer"},
            {"type": "tool_search_output", "id": "i", "execution": "client", "status": "completed"},
        ):
            bases.append({**holder, "tools": [tool]})
    for base, dumped in zip(bases, dump_bases(bases), strict=True):
        items.extend(_mutants(base))
        items.extend(_optional_mutants(base, dumped))
    items.extend(_routing_cases())
    items.extend(_shape_cases())
    unique: dict[str, Any] = {}
    for item in items:
        unique.setdefault(json.dumps(item, sort_keys=True), item)
    return list(unique.values())


def recombined_items(canonical: list[Any], count: int, seed: int = 1) -> list[Any]:
    """Canonical dumps of the bases with keys dropped and keys/values borrowed from other items' dumps
    (so required-field combinations and cross-tag fields meet every model)."""
    rng = random.Random(seed)
    pool: dict[str, list[Any]] = {}

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                pool.setdefault(key, []).append(sub)
                collect(sub)
        elif isinstance(value, list):
            for sub in value:
                collect(sub)

    for dumped in canonical:
        collect(dumped)
    keys = sorted(pool)
    values = [value for group in pool.values() for value in group] + BATTERY
    out: list[Any] = []
    for _ in range(count):
        item = copy.deepcopy(rng.choice(canonical))
        for key in list(item):
            if rng.random() < 0.15:
                item.pop(key)
        for _ in range(rng.randint(0, 3)):
            key = rng.choice(keys)
            item[key] = copy.deepcopy(rng.choice(pool[key]) if rng.random() < 0.7 else rng.choice(values))
        if rng.random() < 0.15:
            item.pop("type", None)
        out.append(item)
    return out
