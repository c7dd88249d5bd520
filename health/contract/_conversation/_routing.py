"""Choosing the item model: by ``type``, then by role/content/status for messages, by shape if untyped.

The routing is a pure function of the raw object so pydantic-core validates against exactly one model.
It reproduces the reference's observable choices, including a sharp edge: ``role``, the first content
part's ``type`` (when truthy) and, for input-message candidates, ``status`` are looked up in hashed sets,
so an unhashable value there raises ``TypeError`` instead of a validation error.
"""

from __future__ import annotations

from typing import Any

from ._training import TOKEN_KEYS, TRAINING_MODELS, token_metadata_problem

__all__ = ["item_tag"]

_INPUT_ROLES = frozenset({"user", "system", "developer"})
_MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})
_INPUT_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_OUTPUT_PART_TYPES = frozenset({"output_text", "refusal"})


def _first_part_is_output(content: list[Any]) -> bool:
    """Whether the first part looks like an output part; an untyped part with ``refusal`` counts."""
    first = content[0]
    if not isinstance(first, dict):
        return False
    kind = first.get("type") or ("refusal" if "refusal" in first else None)
    return kind in _OUTPUT_PART_TYPES


def _message_tag(item: dict[str, Any]) -> str:
    role = item.get("role")
    content = item.get("content")
    if role in _INPUT_ROLES:
        if isinstance(content, list) and item.get("status") in _INPUT_STATUSES:
            return "input_message"
        return "easy_message"
    if isinstance(content, list):
        if content:
            if _first_part_is_output(content):
                return "output_message"
        elif isinstance(item.get("id"), str):
            return "output_message"
    return "easy_message"


def _fits(tag: str, item: dict[str, Any]) -> bool:
    """Whether an untyped message-like item really has the shape of the model its fields point to."""
    if tag == "output_message":
        return isinstance(item.get("id"), str)
    content = item.get("content")
    return not (isinstance(content, list) and content and _first_part_is_output(content))


def _untyped_tag(item: dict[str, Any]) -> str:
    """An item without ``type``: the first shape that fits wins; anything else is an MCP tool listing."""
    content = item.get("content")
    if item.get("role") in _MESSAGE_ROLES and isinstance(content, str | list):
        tag = _message_tag(item)
        if _fits(tag, item):
            return tag
    elif (
        "role" not in item
        and isinstance(content, list)
        and isinstance(item.get("id"), str)
        and (not content or _first_part_is_output(content))
    ):
        return "output_message"
    if "call_id" in item and "name" in item and "arguments" in item:
        return "function_call"
    if "output" in item and isinstance(item.get("call_id"), str):
        return "function_call_output"
    if "name" in item and "arguments" in item:
        return "mcp_call"
    if isinstance(item.get("id"), str) and isinstance(item.get("summary"), list):
        return "reasoning"
    return "mcp_list_tools"


def item_tag(item: Any) -> str | None:
    """The tag of the model that validates ``item``; ``None`` (no tag) for a non-object.

    Invalid token metadata yields a pseudo-tag naming the problem, which matches no model, so the item
    fails validation with that message.
    """
    if not isinstance(item, dict):
        # Serialization asks again with the validated model instance.
        return getattr(item, "item_tag", None)
    if (
        "prompt_token_ids" in item
        or "generation_token_ids" in item
        or "generation_log_probs" in item
        or "routed_experts" in item
    ):
        problem = token_metadata_problem(item)
        if problem is not None:
            return problem
        training = all(key in item for key in TOKEN_KEYS)
    else:
        training = False
    kind = item.get("type")
    if kind is None:
        tag = _untyped_tag(item)
    elif kind == "message":
        tag = _message_tag(item)
    elif isinstance(kind, str):
        return kind if not (training and kind in TRAINING_MODELS) else f"{kind}__training"
    else:
        return None
    return f"{tag}__training" if training and tag in TRAINING_MODELS else tag
