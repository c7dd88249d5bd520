"""Fast path for the everyday conversation items: accept them and build their canonical dump directly.

Validating through the full model union costs several microseconds per item, while nearly every real
item is one of a few plain shapes: a message with text content, a function call, its output, a
reasoning summary. :func:`fast_canonical` recognises those shapes (exact Python types, no token metadata,
no unknown keys that the dump would keep) and returns the canonical dict the model union would dump, in
the same key order. It never rejects: anything it does not recognise returns ``None`` and goes through
the full union, which decides. ``benchmarks/dev/conversation_parity.py`` checks both paths against the
reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["canonical_list", "fast_canonical"]

_TOKEN_KEYS = frozenset(
    {"prompt_token_ids", "generation_token_ids", "generation_log_probs", "routed_experts"}
)
_ROLES = frozenset({"user", "assistant", "system", "developer"})
_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_PHASES = frozenset({"commentary", "final_answer"})
_OUTPUT_TEXT_KEYS = frozenset({"type", "text", "annotations", "logprobs"})
_ABSENT: Any = object()


def _input_text_parts(content: list[Any]) -> list[dict[str, Any]] | None:
    parts = []
    for part in content:
        if part.__class__ is not dict or len(part) != 2 or part.get("type") != "input_text":
            return None
        text = part.get("text")
        if text.__class__ is not str:
            return None
        parts.append({"text": text, "type": "input_text"})
    return parts


def _output_parts(content: list[Any]) -> list[dict[str, Any]] | None:
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.__class__ is not dict:
            return None
        kind = part.get("type")
        if kind == "output_text":
            text = part.get("text")
            if (
                text.__class__ is not str
                or part.get("annotations") != []
                or part.get("logprobs") is not None
                or not _OUTPUT_TEXT_KEYS.issuperset(part)
            ):
                return None
            parts.append({"annotations": [], "text": text, "type": "output_text", "logprobs": None})
        elif kind == "refusal" and len(part) == 2 and part.get("refusal").__class__ is str:
            parts.append({"refusal": part["refusal"], "type": "refusal"})
        else:
            return None
    return parts


def _message(item: dict[str, Any]) -> dict[str, Any] | None:
    role = item.get("role")
    phase = item.get("phase")
    if role.__class__ is not str or role not in _ROLES:
        return None
    if phase is not None and (phase.__class__ is not str or phase not in _PHASES):
        return None
    content = item.get("content")
    if content.__class__ is str:
        return {"content": content, "role": role, "type": "message", "phase": phase}
    if content.__class__ is not list or not content:
        return None
    if role == "assistant":
        first = content[0]
        if first.__class__ is dict and first.get("type") in ("output_text", "refusal"):
            item_id = item.get("id")
            status = item.get("status", "completed")
            if item_id.__class__ is not str or status.__class__ is not str or status not in _STATUSES:
                return None
            parts = _output_parts(content)
            if parts is None:
                return None
            return {
                "id": item_id,
                "content": parts,
                "role": "assistant",
                "status": status,
                "type": "message",
                "phase": phase,
            }
    elif "status" in item:
        return None
    parts = _input_text_parts(content)
    if parts is None:
        return None
    return {"content": parts, "role": role, "type": "message", "phase": phase}


def _function_call(item: dict[str, Any]) -> dict[str, Any] | None:
    arguments = item.get("arguments")
    call_id = item.get("call_id")
    name = item.get("name")
    item_id = item.get("id")
    status = item.get("status")
    namespace = item.get("namespace")
    if (
        arguments.__class__ is not str
        or call_id.__class__ is not str
        or name.__class__ is not str
        or (item_id is not None and item_id.__class__ is not str)
        or (status is not None and (status.__class__ is not str or status not in _STATUSES))
        or (namespace is not None and namespace.__class__ is not str)
    ):
        return None
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        "status": status,
        "namespace": namespace,
    }


def _function_call_output(item: dict[str, Any]) -> dict[str, Any] | None:
    call_id = item.get("call_id")
    output = item.get("output")
    item_id = item.get("id")
    status = item.get("status")
    if (
        call_id.__class__ is not str
        or output.__class__ is not str
        or (item_id is not None and item_id.__class__ is not str)
        or (status is not None and (status.__class__ is not str or status not in _STATUSES))
    ):
        return None
    return {
        "call_id": call_id,
        "output": output,
        "type": "function_call_output",
        "id": item_id,
        "status": status,
    }


def _text_parts(parts: Any, kind: str) -> list[dict[str, Any]] | None:
    if parts.__class__ is not list:
        return None
    out = []
    for part in parts:
        if part.__class__ is not dict or len(part) != 2 or part.get("type") != kind:
            return None
        text = part.get("text")
        if text.__class__ is not str:
            return None
        out.append({"text": text, "type": kind})
    return out


def _reasoning(item: dict[str, Any]) -> dict[str, Any] | None:
    item_id = item.get("id")
    encrypted = item.get("encrypted_content")
    if item_id.__class__ is not str or (encrypted is not None and encrypted.__class__ is not str):
        return None
    summary = _text_parts(item.get("summary"), "summary_text")
    if summary is None:
        return None
    content = item.get("content")
    if content is not None:
        content = _text_parts(content, "reasoning_text")
        if content is None:
            return None
    return {
        "id": item_id,
        "summary": summary,
        "type": "reasoning",
        "encrypted_content": encrypted,
        "content": content,
    }


_HANDLERS: dict[Any, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
    "message": _message,
    _ABSENT: _message,
    "function_call": _function_call,
    "function_call_output": _function_call_output,
    "reasoning": _reasoning,
}


def fast_canonical(item: Any) -> dict[str, Any] | None:
    """The canonical dump of a plainly valid everyday item, or ``None`` to defer to the full union."""
    if item.__class__ is not dict or not _TOKEN_KEYS.isdisjoint(item):
        return None
    kind = item.get("type", _ABSENT)
    if kind.__class__ is not str and kind is not _ABSENT:
        return None
    handler = _HANDLERS.get(kind)
    return None if handler is None else handler(item)


def canonical_list(items: list[Any]) -> list[dict[str, Any]] | None:
    """:func:`fast_canonical` over a whole conversation (``None`` unless every item is everyday), with
    the commonest shape, a text message, handled inline: one Python call per conversation."""
    out: list[dict[str, Any]] = []
    append = out.append
    handlers = _HANDLERS
    for item in items:
        if item.__class__ is not dict or not _TOKEN_KEYS.isdisjoint(item):
            return None
        kind = item.get("type", _ABSENT)
        if kind == "message" or kind is _ABSENT:
            role = item.get("role")
            content = item.get("content")
            phase = item.get("phase")
            if (
                content.__class__ is str
                and role.__class__ is str
                and role in _ROLES
                and (phase is None or (phase.__class__ is str and phase in _PHASES))
            ):
                append({"content": content, "role": role, "type": "message", "phase": phase})
                continue
            canonical = _message(item)
        elif kind.__class__ is str:
            handler = handlers.get(kind)
            if handler is None:
                return None
            canonical = handler(item)
        else:
            return None
        if canonical is None:
            return None
        append(canonical)
    return out
