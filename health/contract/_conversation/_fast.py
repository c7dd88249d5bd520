"""Fast path for the everyday conversation items: accept them and build their canonical dump directly.

Validating through the full model union costs several microseconds per item, while nearly every real
item is one of a few plain shapes: a message with text content, a function call, its output, a
reasoning summary. :func:`fast_canonical` recognises those shapes (exact Python types, no token metadata,
no unknown keys that the dump would keep) and returns the canonical dict the model union would dump, in
the same key order. It never rejects: anything it does not recognise returns ``None`` and goes through
the full union, which decides. ``benchmarks/dev/conversation_parity.py`` checks both paths against the
reference.

:func:`everyday_list_valid` answers a narrower question, acceptance only, for callers that never use the
dump (``health.fast_path``): it also vouches for RL-style items, the everyday shapes carrying token
metadata (``…__training`` variants) and output text with ``"logprobs": []``. Those validate into model
instances, so they have no canonical dict here; they carry no key outside their model's fields and no
free-form value, so their dump cannot fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["canonical_list", "canonical_list_accepts", "everyday_list_valid", "fast_canonical"]

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


# -- acceptance only: RL-style items ------------------------------------------------------------

_INT: frozenset[type] = frozenset({int})
_NUMBER: frozenset[type] = frozenset({int, float})


def _exact_list(value: Any, types: frozenset[type]) -> bool:
    """A list whose items are all of exactly these types (so no ``bool`` for ``int``)."""
    return value.__class__ is list and types.issuperset(map(type, value))


def _has_empty_logprobs(part: Any) -> bool:
    return (
        part.__class__ is dict
        and part.get("type") == "output_text"
        and part.get("logprobs").__class__ is list
        and not part["logprobs"]
    )


def _without_empty_logprobs(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with ``"logprobs": []`` dropped from its ``output_text`` parts (a copy if any is).

    The contract accepts an empty log-prob list wherever it accepts ``"logprobs": null``, and keeps
    nothing free-form in it; the everyday handlers recognise the latter only.
    """
    content = item.get("content")
    if content.__class__ is not list or not any(map(_has_empty_logprobs, content)):
        return item
    parts = [
        {key: value for key, value in part.items() if key != "logprobs"}
        if _has_empty_logprobs(part)
        else part
        for part in content
    ]
    return {**item, "content": parts}


def _plain_token_metadata(item: dict[str, Any]) -> bool:
    """All three token keys with exact types (``routed_experts``, with its own rules, defers)."""
    return (
        "routed_experts" not in item
        and _exact_list(item.get("prompt_token_ids"), _INT)
        and _exact_list(item.get("generation_token_ids"), _INT)
        and _exact_list(item.get("generation_log_probs"), _NUMBER)
    )


_TRAINING_HANDLERS: dict[Any, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
    kind: _HANDLERS[kind] for kind in ("message", _ABSENT, "function_call", "reasoning")
}
"""The everyday kinds with a ``…__training`` variant (function_call_output has none)."""


def _item_valid(item: Any) -> bool:
    if item.__class__ is not dict:
        return False
    if _TOKEN_KEYS.isdisjoint(item):
        return fast_canonical(_without_empty_logprobs(item)) is not None
    if not _plain_token_metadata(item):
        return False
    kind = item.get("type", _ABSENT)
    handler = _TRAINING_HANDLERS.get(kind) if kind.__class__ is str or kind is _ABSENT else None
    if handler is None:
        return False
    # The handlers never look at the token keys. The item routes to the training variant of the
    # model the handler recognised, which (unlike the everyday path) is not vouched for with unknown
    # keys: the item may hold only that model's fields, which are the canonical dict's keys, and
    # the three token keys (never among them).
    canonical = handler(_without_empty_logprobs(item))
    return canonical is not None and len(canonical.keys() & item.keys()) + 3 == len(item)


def everyday_list_valid(items: list[Any]) -> bool:
    """Whether the contract accepts every item, for the shapes recognised cheaply (see the module doc).

    ``True`` for everything :func:`canonical_list` accepts and for the everyday shapes with plainly
    valid token metadata (exact ``int`` ids, ``int``/``float`` log-probs, no ``routed_experts``, no
    unknown key) or ``"logprobs": []`` on output text. ``False`` defers to the full union: it never
    means invalid. What it accepts dumps to strings, numbers and shallow lists only, so its dump
    cannot fail.
    """
    return all(_item_valid(item) for item in items)


# -- acceptance only: the everyday shapes, without building their dumps --------------------------


def _input_text_parts_ok(content: list[Any]) -> bool:
    for part in content:
        if (
            part.__class__ is not dict
            or len(part) != 2
            or part.get("type") != "input_text"
            or part.get("text").__class__ is not str
        ):
            return False
    return True


def _output_parts_ok(content: list[Any]) -> bool:
    for part in content:
        if part.__class__ is not dict:
            return False
        kind = part.get("type")
        if kind == "output_text":
            if (
                part.get("text").__class__ is not str
                or part.get("annotations") != []
                or part.get("logprobs") is not None
                or not _OUTPUT_TEXT_KEYS.issuperset(part)
            ):
                return False
        elif not (kind == "refusal" and len(part) == 2 and part.get("refusal").__class__ is str):
            return False
    return True


def _message_ok(item: dict[str, Any]) -> bool:
    role = item.get("role")
    phase = item.get("phase")
    if role.__class__ is not str or role not in _ROLES:
        return False
    if phase is not None and (phase.__class__ is not str or phase not in _PHASES):
        return False
    content = item.get("content")
    if content.__class__ is str:
        return True
    if content.__class__ is not list or not content:
        return False
    if role == "assistant":
        first = content[0]
        if first.__class__ is dict and first.get("type") in ("output_text", "refusal"):
            status = item.get("status", "completed")
            return (
                item.get("id").__class__ is str
                and status.__class__ is str
                and status in _STATUSES
                and _output_parts_ok(content)
            )
    elif "status" in item:
        return False
    return _input_text_parts_ok(content)


def _optional_status_ok(item: dict[str, Any]) -> bool:
    status = item.get("status")
    return status is None or (status.__class__ is str and status in _STATUSES)


def _function_call_ok(item: dict[str, Any]) -> bool:
    item_id = item.get("id")
    namespace = item.get("namespace")
    return (
        item.get("arguments").__class__ is str
        and item.get("call_id").__class__ is str
        and item.get("name").__class__ is str
        and (item_id is None or item_id.__class__ is str)
        and _optional_status_ok(item)
        and (namespace is None or namespace.__class__ is str)
    )


def _function_call_output_ok(item: dict[str, Any]) -> bool:
    item_id = item.get("id")
    return (
        item.get("call_id").__class__ is str
        and item.get("output").__class__ is str
        and (item_id is None or item_id.__class__ is str)
        and _optional_status_ok(item)
    )


def _text_parts_ok(parts: Any, kind: str) -> bool:
    if parts.__class__ is not list:
        return False
    for part in parts:
        if (
            part.__class__ is not dict
            or len(part) != 2
            or part.get("type") != kind
            or part.get("text").__class__ is not str
        ):
            return False
    return True


def _reasoning_ok(item: dict[str, Any]) -> bool:
    encrypted = item.get("encrypted_content")
    content = item.get("content")
    return (
        item.get("id").__class__ is str
        and (encrypted is None or encrypted.__class__ is str)
        and _text_parts_ok(item.get("summary"), "summary_text")
        and (content is None or _text_parts_ok(content, "reasoning_text"))
    )


_ACCEPTORS: dict[Any, Callable[[dict[str, Any]], bool]] = {
    "message": _message_ok,
    _ABSENT: _message_ok,
    "function_call": _function_call_ok,
    "function_call_output": _function_call_output_ok,
    "reasoning": _reasoning_ok,
}


def canonical_list_accepts(items: list[Any]) -> bool:
    """``canonical_list(items) is not None``, without building the canonical dicts.

    The same conditions item by item, for callers that need acceptance only (the batch fast
    path validates a conversation but never reads its dump).
    """
    acceptors = _ACCEPTORS
    for item in items:
        if item.__class__ is not dict or not _TOKEN_KEYS.isdisjoint(item):
            return False
        kind = item.get("type", _ABSENT)
        if kind.__class__ is not str and kind is not _ABSENT:
            return False
        acceptor = acceptors.get(kind)
        if acceptor is None or not acceptor(item):
            return False
    return True
