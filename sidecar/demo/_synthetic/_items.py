"""Responses-API and chat-completions payload fragments (input items, tool schemas, responses).

Everything here returns fresh dicts: rows are handed to callers who may mutate them.
"""

from __future__ import annotations

import random
from typing import Any, Final

import orjson

from ._text import hex_id

__all__ = [
    "TOOL_NAMES",
    "assistant_message_item",
    "chat_response",
    "chat_tools",
    "function_call_item",
    "function_call_output_item",
    "reasoning_item",
    "responses_response",
    "responses_tools",
    "to_chat_messages",
    "user_message_item",
]

JSON = dict[str, Any]

_TOOL_SPECS: Final = (
    ("run_shell", "Run a shell command in the sandbox and return stdout and stderr.", "command"),
    ("read_file", "Read a text file from the workspace.", "path"),
    ("write_file", "Write text content to a file in the workspace.", "path"),
    ("search", "Search the workspace or the web for a query.", "query"),
    ("task", "Spawn a subagent to work on a delegated sub-task and return its answer.", "description"),
)
TOOL_NAMES: Final = tuple(name for name, _, _ in _TOOL_SPECS if name != "task")


def _parameters(arg: str) -> JSON:
    return {
        "type": "object",
        "properties": {arg: {"type": "string", "description": f"The {arg} to use."}},
        "required": [arg],
        "additionalProperties": False,
    }


_RESPONSES_TOOLS: Final = orjson.dumps(
    [
        {
            "type": "function",
            "name": name,
            "description": desc,
            "parameters": _parameters(arg),
            "strict": False,
        }
        for name, desc, arg in _TOOL_SPECS
    ]
)
_CHAT_TOOLS: Final = orjson.dumps(
    [
        {"type": "function", "function": {"name": name, "description": desc, "parameters": _parameters(arg)}}
        for name, desc, arg in _TOOL_SPECS
    ]
)


def responses_tools() -> list[JSON]:
    """Tool schemas as a Responses-API request lists them (a fresh copy)."""
    tools: list[JSON] = orjson.loads(_RESPONSES_TOOLS)
    return tools


def chat_tools() -> list[JSON]:
    """Tool schemas as a chat-completions request lists them (a fresh copy)."""
    tools: list[JSON] = orjson.loads(_CHAT_TOOLS)
    return tools


def user_message_item(content: str) -> JSON:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": content}]}


def assistant_message_item(rng: random.Random, content: str) -> JSON:
    return {
        "type": "message",
        "id": f"msg_{hex_id(rng)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }


def reasoning_item(rng: random.Random, summary: str) -> JSON:
    parts = [{"type": "summary_text", "text": summary}] if summary else []
    return {"type": "reasoning", "id": f"rs_{hex_id(rng)}", "summary": parts}


def function_call_item(rng: random.Random, call_id: str, name: str, arguments: str) -> JSON:
    return {
        "type": "function_call",
        "id": f"fc_{hex_id(rng)}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def function_call_output_item(call_id: str, output: str) -> JSON:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def to_chat_messages(items: list[JSON]) -> list[JSON]:
    """Chat-completions messages equivalent to Responses input items (for chat-dialect requests)."""
    messages: list[JSON] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            messages.append({"role": item["role"], "content": item["content"][0]["text"]})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return messages


def responses_response(
    response_id: str,
    model: str,
    created_at: float,
    output: list[JSON],
    usage: JSON,
    *,
    incomplete: bool = False,
) -> JSON:
    """A Responses-API response object as the model server returns it."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": float(int(created_at)),
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "usage": usage,
    }


def chat_response(
    response_id: str,
    model: str,
    created: float,
    content: str | None,
    tool_calls: list[JSON] | None,
    finish_reason: str,
    usage: JSON,
) -> JSON:
    """A chat-completions response object as a vLLM server returns it."""
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(created),
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "refusal": None,
                    "tool_calls": tool_calls,
                    "reasoning_content": None,
                },
            }
        ],
        "usage": usage,
        "system_fingerprint": "vllm-0.11.0-tp4",
    }
