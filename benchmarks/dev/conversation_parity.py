"""Differential corpus for ``health.contract.conversation`` against the NeMo Gym 0.7.0 oracle.

NEEDS THE ORACLE (``source /tmp/oracle/env.sh``); a development tool, never used by tests or CI.

Generates conversation items (every known tag, each field replaced by a battery of values, keys removed,
unknown keys added, ``type`` removed, token-metadata variants, non-objects, deep nesting), validates each
with the reference's item union (in a subprocess under ``$ORACLE_PY``) and with ours, and prints every
item on which the outcome differs. The outcome is: accepted (and by which tag), rejected (and under which
tag), another exception type, or a dump failure.

    .venv/bin/python benchmarks/dev/conversation_parity.py [--show N] [--dump-cases FILE]
    .venv/bin/python benchmarks/dev/conversation_parity.py --run-dir DIR   # also write a run dir for
        refcli.py health-check: one rollout per item, to confirm record_unreadable end to end
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import TypeAdapter, ValidationError

from health.contract.conversation import ConversationItem, item_tag

_ORACLE_SERVER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from nemo_gym.openai_utils import NeMoGymResponseInputItem
from pydantic import TypeAdapter, ValidationError
ta = TypeAdapter(list[NeMoGymResponseInputItem])
for line in sys.stdin:
    out = []
    for item in json.loads(line):
        try:
            v = ta.validate_python([item])
        except ValidationError as e:
            out.append(["err", [list(x["loc"]) for x in e.errors(include_url=False)], None, None])
            continue
        except Exception as e:
            out.append(["exc", type(e).__name__, None, None])
            continue
        try:
            dumped = ta.dump_python(v, mode="json")[0]
            out.append(["ok", type(v[0]).__name__, None, dumped])
        except Exception as e:
            out.append(["ok", type(v[0]).__name__, type(e).__name__, None])
    sys.stdout.write(json.dumps(out, default=str) + "\n"); sys.stdout.flush()
"""

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


def _deep(levels: int) -> Any:
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
        yield _replace(base, (*path, "zz_extra"), _deep(300))
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


def corpus() -> list[Any]:
    items: list[Any] = []
    bases: list[dict[str, Any]] = list(MESSAGE_BASES + TOOL_BASES + BUILTIN_BASES)
    for tool in TOOL_DEFS:
        for holder in (
            {"type": "additional_tools", "role": "developer"},
            {"type": "tool_search_output", "id": "i", "execution": "client", "status": "completed"},
        ):
            bases.append({**holder, "tools": [tool]})
    dumps = _oracle_run(bases, _oracle_proc())
    for base, row in zip(bases, dumps, strict=True):
        items.extend(_mutants(base))
        items.extend(_optional_mutants(base, row[3]))
    items.extend(_routing_cases())
    items.extend(_shape_cases())
    unique: dict[str, Any] = {}
    for item in items:
        unique.setdefault(json.dumps(item, sort_keys=True), item)
    return list(unique.values())


_CLASS_TO_TAG: dict[str, str] = {}


def _oracle_tags() -> None:
    """Learn the reference's class-name -> tag mapping from one error message (both listed in order)."""
    rows = _oracle_run([{"type": "zz-no-such-tag"}, "not-an-object"], _oracle_proc())
    del rows


_PROC: subprocess.Popen[str] | None = None


def _oracle_proc() -> subprocess.Popen[str]:
    global _PROC
    if _PROC is None:
        python = os.environ.get("ORACLE_PY", "/tmp/oracle/venv/bin/python")
        env = dict(os.environ, PYTHONPATH=os.environ.get("ORACLE_NGREF", "/tmp/oracle/ngref"))
        _PROC = subprocess.Popen(
            [python, "-c", _ORACLE_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
    return _PROC


def _oracle_run(items: list[Any], proc: subprocess.Popen[str]) -> list[list[Any]]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(items) + "\n")
    proc.stdin.flush()
    result: list[list[Any]] = json.loads(proc.stdout.readline())
    return result


_TAG_OF_CLASS = {
    "EasyInputMessage": "easy_message",
    "Message": "input_message",
    "ResponseOutputMessage": "output_message",
    "ResponseFunctionToolCall": "function_call",
    "FunctionCallOutput": "function_call_output",
    "ResponseReasoningItem": "reasoning",
    "ResponseMcpCall": "mcp_call",
    "ResponseMcpListTools": "mcp_list_tools",
    "ResponseMcpApprovalRequest": "mcp_approval_request",
    "ResponseFileSearchToolCall": "file_search_call",
    "ResponseFunctionWebSearch": "web_search_call",
    "ResponseComputerToolCall": "computer_call",
    "ImageGenerationCall": "image_generation_call",
    "ResponseCodeInterpreterToolCall": "code_interpreter_call",
    "LocalShellCall": "local_shell_call",
    "ResponseCustomToolCall": "custom_tool_call",
    "ComputerCallOutput": "computer_call_output",
    "ResponseCustomToolCallOutput": "custom_tool_call_output",
    "LocalShellCallOutput": "local_shell_call_output",
    "McpApprovalResponse": "mcp_approval_response",
    "ResponseApplyPatchToolCall": "apply_patch_call",
    "ResponseApplyPatchToolCallOutput": "apply_patch_call_output",
    "ResponseCompactionItem": "compaction",
    "ResponseFunctionShellToolCall": "shell_call",
    "ResponseFunctionShellToolCallOutput": "shell_call_output",
    "ResponseToolSearchCall": "tool_search_call",
    "ResponseToolSearchOutputItem": "tool_search_output",
    "CompactionTrigger": "compaction_trigger",
    "AdditionalTools": "additional_tools",
}


def _oracle_outcome(row: list[Any]) -> str:
    status, info, dump_error, dumped = row
    if status == "exc":
        return f"raises {info}"
    if status == "err":
        tags = sorted({str(loc[1]) if len(loc) > 1 else "-" for loc in info})
        return "reject " + ",".join(tags)
    name = info.removeprefix("NeMoGym")
    training = name.endswith("ForTraining")
    tag = _TAG_OF_CLASS.get(name.removesuffix("ForTraining"), name) + ("__training" if training else "")
    return f"accept {tag}" + (f" dump-fails {dump_error}" if dump_error else f" {_digest(dumped)}")


def _digest(dumped: Any) -> str:
    """A short fingerprint of the canonical dump, so a different dump shows as a different outcome."""
    return hashlib.sha1(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:8]


_ADAPTER: TypeAdapter[list[Any]] = TypeAdapter(list[ConversationItem])


def ours(item: Any) -> str:
    try:
        value = _ADAPTER.validate_python([item])
    except ValidationError as exc:
        tags = sorted({str(err["loc"][1]) if len(err["loc"]) > 1 else "-" for err in exc.errors()})
        return "reject " + ",".join(tags)
    except Exception as exc:
        return f"raises {type(exc).__name__}"
    outcome = f"accept {item_tag(item)}"
    try:
        dumped = _ADAPTER.dump_python(value, mode="json")[0]
    except Exception as exc:
        return outcome + f" dump-fails {type(exc).__name__}"
    return outcome + f" {_digest(dumped)}"


def _key(outcome: str) -> str:
    """Rejections compare equal whatever member reported them; the tags are kept for reading. A dump that
    fails with ValidationError is, for a trajectory, the same error as a rejection."""
    if outcome.startswith("reject") or outcome.endswith("dump-fails ValidationError"):
        return "reject"
    return outcome


def compare(items: list[Any], chunk: int = 2000) -> list[tuple[Any, str, str]]:
    proc = _oracle_proc()
    diffs = []
    for start in range(0, len(items), chunk):
        part = items[start : start + chunk]
        for item, row in zip(part, _oracle_run(part, proc), strict=True):
            expected, actual = _oracle_outcome(row), ours(item)
            if _key(expected) != _key(actual):
                diffs.append((item, expected, actual))
    return diffs


def write_run_dir(conversations: list[list[Any]], run_dir: Path) -> None:
    """One rollout per conversation: a healthy trajectory whose single invocation holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "rollouts.jsonl").open("w") as out:
        for index, conversation in enumerate(conversations):
            record = {
                "_ng_task_index": 0,
                "_ng_rollout_index": index,
                "ng_trajectory": {
                    "task_id": "t",
                    "rollout_id": f"r{index}",
                    "invocations": [{"invocation_id": "main", "conversation": conversation}],
                },
            }
            out.write(json.dumps(record) + "\n")


def end_to_end(conversations: list[list[Any]], run_dir: Path) -> list[tuple[Any, str | None, str | None]]:
    """Run ``refcli.py health-check`` on one rollout per conversation; compare its ``record_unreadable``
    error with the error ``health.contract.canonical_trajectory`` reports for the same trajectory."""
    from health.contract import canonical_trajectory

    write_run_dir(conversations, run_dir)
    refcli = "/work/shared/tools/reference/refcli.py"
    subprocess.run([sys.executable, refcli, "health-check", str(run_dir)], check=True, capture_output=True)
    expected: dict[int, str | None] = {}
    for line in (run_dir / "rollout_verdicts.jsonl").read_text().splitlines():
        row = json.loads(line)
        errors = [f["detail"]["error"] for f in row["findings"] if f["check"] == "record_unreadable"]
        expected[row["_ng_rollout_index"]] = errors[0] if errors else None
    diffs = []
    for index, conversation in enumerate(conversations):
        record = {"task_id": "t", "rollout_id": f"r{index}",
                  "invocations": [{"invocation_id": "main", "conversation": conversation}]}  # fmt: skip
        actual = canonical_trajectory(record)[1]
        if actual != expected[index]:
            diffs.append((conversation, expected[index], actual))
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--show", type=int, default=3, help="differing items to print per (type, outcome)")
    parser.add_argument(
        "--random", type=int, default=0, metavar="N", help="add N random multi-mutation items"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the random items")
    parser.add_argument("--diffs", type=Path, help="write every differing item as JSONL")
    parser.add_argument("--dump-cases", type=Path, help="write every (item, oracle outcome) as JSONL")
    parser.add_argument("--explain", type=int, default=0, help="print both dumps for N differing dumps")
    parser.add_argument("--run-dir", type=Path, help="write a run dir (one rollout per item) for refcli.py")
    parser.add_argument(
        "--end-to-end", type=int, default=0, metavar="N",
        help="also run refcli.py health-check on N sampled items (+ nesting-depth probes) in --run-dir",
    )  # fmt: skip
    args = parser.parse_args()
    items = corpus()
    if args.random:
        items += random_items(args.random, args.seed)
    diffs = compare(items)
    print(f"{len(items)} items, {len(diffs)} differ")
    print(Counter((e.split(" ")[0], a.split(" ")[0]) for _, e, a in diffs).most_common())
    shown: Counter[tuple[str, str, str]] = Counter()
    for item, expected, actual in diffs:
        group = (str(item.get("type")) if isinstance(item, dict) else "-", _key(expected), _key(actual))
        shown[group] += 1
        if shown[group] > args.show:
            continue
        print(f"oracle: {expected:40s} ours: {actual:40s} {json.dumps(item)[:300]}")
    if args.diffs:
        with args.diffs.open("w") as out:
            for item, expected, actual in diffs:
                out.write(json.dumps({"item": item, "oracle": expected, "ours": actual}) + "\n")
    explained = 0
    for item, expected, actual in diffs:
        if (
            explained >= args.explain
            or "dump-fails" in expected + actual
            or not (expected.startswith("accept") and actual.startswith("accept"))
        ):
            continue
        explained += 1
        row = _oracle_run([item], _oracle_proc())[0]
        print("ITEM  ", json.dumps(item)[:300])
        print("ORACLE", json.dumps(row[3], sort_keys=True)[:600])
        print(
            "OURS  ",
            json.dumps(
                _ADAPTER.dump_python(_ADAPTER.validate_python([item]), mode="json")[0], sort_keys=True
            )[:600],
        )
    if args.dump_cases:
        proc = _oracle_proc()
        with args.dump_cases.open("w") as out:
            for item, row in zip(items, _oracle_run(items, proc), strict=True):
                out.write(json.dumps({"item": item, "oracle": _oracle_outcome(row)}) + "\n")
    if args.end_to_end and args.run_dir:
        sample = random.Random(0).sample(items, min(args.end_to_end, len(items)))
        for levels in (252, 253, 254, 255):
            deep = _deep(levels)
            sample += [{"zz": deep}, {"type": "tool_search_call", "id": "i", "execution": "server",
                       "status": "completed", "arguments": deep},
                       {"type": "mcp_call", "name": "n", "arguments": "{}",
                        "error": {"type": "mcp_tool_execution_error", "content": deep}},
                       {"type": "custom_tool_call", "call_id": "c", "name": "n", "input": "x",
                        "zz": deep},
                       {"type": "reasoning", "id": "r",
                        "summary": [{"type": "summary_text", "text": "t", "zz": deep}]},
                       {"type": "message", "role": "user", "content": "x", "zz": deep},
                       {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}", "zz": deep},
                       {"type": "additional_tools", "role": "developer",
                        "tools": [{"type": "function", "name": "f", "parameters": {"p": deep}}]}]  # fmt: skip
        rng = random.Random(1)
        conversations = [[item] for item in sample]
        conversations += [rng.sample(sample, rng.randint(2, 6)) for _ in range(len(sample) // 4)]
        e2e = end_to_end(conversations, args.run_dir)
        print(f"end to end: {len(conversations)} conversations, {len(e2e)} differ")
        for item, expected_error, actual_error in e2e[: args.show * 10]:
            print(f"  reference: {expected_error}  ours: {actual_error}  {json.dumps(item)[:200]}")
        diffs.extend((item, str(e), str(a)) for item, e, a in e2e)
    elif args.run_dir:
        write_run_dir([[item] for item in items], args.run_dir)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
