"""Content tests on free-form (``Any``) trajectory values: text present, tool calls, saved output.

Duck-typed walks whose blind spots are part of the contract (a fixed set of text keys, tool
calls only at an object's top level or in arrays; a malformed ``choices`` raises).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CONTENT_KEYS",
    "TOOL_CALL_TYPES",
    "has_tool_call",
    "nonempty",
    "response_has_content",
]

CONTENT_KEYS: tuple[str, ...] = (
    "text",
    "content",
    "output_text",
    "answer",
    "refusal",
    "encrypted_content",
    "reasoning",
    "reasoning_content",
    "summary",
)

_TRIED_FIRST = ("text", "content", "summary")
_CONTENT_KEYS_BY_USE: tuple[str, ...] = (
    *_TRIED_FIRST,
    *(key for key in CONTENT_KEYS if key not in _TRIED_FIRST),
)
""":data:`CONTENT_KEYS` with those of output text parts, messages and reasoning items first:
an object is non-empty if the value under any of them is, so the order cannot change the
answer, only how soon an everyday item is found to hold text."""

TOOL_CALL_TYPES: frozenset[str] = frozenset(
    {
        "function_call",
        "tool_call",
        "tool_use",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "file_search_call",
        "web_search_call",
        "computer_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "custom_tool_call",
    }
)


def nonempty(value: Any) -> bool:
    """True when ``value`` holds visible text under a recognised key (``str.strip`` semantics)."""
    if isinstance(value, str):
        # ``bool(value.strip())`` without copying the text: strip and isspace share one
        # definition of whitespace
        return value != "" and not value.isspace()
    if isinstance(value, list):
        for item in value:  # noqa: SIM110 - a loop costs less than any() over a generator here
            if nonempty(item):
                return True
        return False
    if isinstance(value, dict):
        for key in _CONTENT_KEYS_BY_USE:
            if key in value and nonempty(value[key]):
                return True
    return False


def has_tool_call(value: Any) -> bool:
    """True for a tool-call typed object, an object with truthy ``tool_calls``, or an array holding one.

    An unhashable ``type`` raises ``TypeError``, as the membership test does in NeMo Gym.
    """
    if isinstance(value, list):
        for item in value:
            # an object item is tested here, as the branch below tests it: a call less per item
            if isinstance(item, dict):
                if item.get("type") in TOOL_CALL_TYPES or item.get("tool_calls"):
                    return True
            elif has_tool_call(item):
                return True
        return False
    if isinstance(value, dict):
        if value.get("type") in TOOL_CALL_TYPES:
            return True
        return bool(value.get("tool_calls"))
    return False


def response_has_content(response: Any) -> bool:
    """Whether a saved model response holds visible output (text, output items, choice text).

    Raises ``TypeError`` for a truthy, non-iterable ``choices`` and ``AttributeError`` for a
    truthy, non-object choice ``message``.
    """
    if not isinstance(response, dict):
        return False
    if nonempty(response.get("output_text")) or nonempty(response.get("content")):
        return True
    if nonempty(response.get("output")):
        return True
    for choice in response.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message") or {}
        if nonempty(choice.get("text")) or nonempty(message.get("content")):
            return True
    return False
