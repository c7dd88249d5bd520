"""The batch fast path: one JSONL line to the rollout checks' inputs, without building the payloads.

The reference parses every line completely (orjson) and validates the trajectory with
pydantic. Most of those bytes are the captured calls' ``request`` / ``response`` payloads,
which no check reads unless a call stopped for length. :func:`read_everyday_record` reaches
the same inputs in two C passes and a little Python, for the records that are plainly valid:

1. **The line is JSON exactly when orjson says so.** simdjson validates the whole document
   (UTF-8, escapes and surrogates, number syntax and range, nesting). Every document it
   accepts, orjson accepts with the same values, with two exceptions it does not share and
   which are handled here: a leading UTF-8 BOM (orjson refuses it; the record must start
   with ``{``), and nothing else found by ``tests/health/test_fast_path.py``'s differential
   corpus. simdjson refusing what orjson accepts (64-bit-plus integers, nesting past 1024) is
   harmless: the line takes the full path.
2. **The trajectory is valid exactly when the contract says so** for the strict subset
   decoded by :mod:`health.strict_schema`, with the conversation items checked by the
   contract's own everyday-item recogniser.
3. **The canonical dump cannot fail.** Free-form values are shown to be nested at most 253
   levels (orjson, or an opening-bracket count for the raw payloads), as
   ``health.digest`` requires before skipping the dump.

Whenever a step cannot prove its point it returns ``None`` and the caller runs the full path
(orjson + pydantic), which decides. The fast path never reports anything itself.
"""

from __future__ import annotations

import threading
from typing import Any, Final, NamedTuple

import orjson
import simdjson

from .contract._conversation._fast import canonical_list
from .strict_schema import StrictRecord, contract_rules_hold, decode_strict

__all__ = ["UNREAD_RESPONSE", "EverydayRecord", "read_everyday_record"]

_MAX_FREE_FORM_DEPTH = 253
_MAX_LINE_BYTES = 64 << 20
"""Longer lines take the full path: simdjson's parser keeps a buffer as large as its largest input."""
_NOT_OPENERS = bytes(code for code in range(256) if code not in b"[{")
_LENGTH_FINISH_REASONS = frozenset({"length", "max_output_tokens", "max_tokens"})
"""``health.checks.LENGTH_FINISH_REASONS``: the only calls whose ``response`` a check reads."""


class _UnreadResponse:
    """Stands for a non-null ``response`` payload that no check reads (finish reason not a length one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<response not materialized>"


UNREAD_RESPONSE: Final = _UnreadResponse()


class EverydayRecord(NamedTuple):
    """A record the fast path vouches for: the strict decode and each call's ``response``."""

    record: StrictRecord
    responses: list[Any]
    """Per ``model_calls[i]``: the parsed payload where a check may read it, else ``None``
    (JSON ``null`` or absent) or :data:`UNREAD_RESPONSE`."""


_local = threading.local()


def _validator() -> simdjson.Parser:
    """simdjson parsers are not thread-safe and keep their buffers: one per thread."""
    parser: simdjson.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


def _is_json_for_orjson(data: bytes) -> bool:
    """True only if orjson would parse ``data`` (an object) to the values msgspec decodes."""
    if data[:1] != b"{" or len(data) > _MAX_LINE_BYTES:
        return False
    try:
        _validator().parse(data)  # the lazy document proxy is dropped at once
    except Exception:  # any refusal (ValueError, RuntimeError, UnicodeDecodeError ...) defers
        return False
    return True


def _raw_depth_bounded(raw: bytes) -> bool:
    """A raw JSON span holds fewer than 254 nested levels (each level opens with ``[`` or ``{``)."""
    return len(raw) <= 2 * _MAX_FREE_FORM_DEPTH or (
        len(raw.translate(None, _NOT_OPENERS)) <= _MAX_FREE_FORM_DEPTH
    )


def read_everyday_record(data: bytes) -> EverydayRecord | None:
    """The checks' inputs for a stripped JSONL line, or ``None`` to take the full path."""
    if not _is_json_for_orjson(data):
        return None
    record = decode_strict(data)
    if record is None:
        return None
    trajectory = record.ng_trajectory
    if trajectory is None:
        return EverydayRecord(record, [])
    if not contract_rules_hold(trajectory):
        return None
    for invocation in trajectory.invocations:
        if invocation.conversation and canonical_list(invocation.conversation) is None:
            return None
    free_form: list[Any] = [tool_call.output for tool_call in trajectory.tool_calls]
    for turn in trajectory.turns:
        free_form += (turn.question, turn.answer, turn.reasoning_content)
    try:
        orjson.dumps(free_form)  # orjson refuses exactly what is nested deeper than 254 levels
    except orjson.JSONEncodeError:
        return None
    responses: list[Any] = []
    for call in trajectory.model_calls:
        request = bytes(call.request)
        response = bytes(call.response)
        if not (_raw_depth_bounded(request) and _raw_depth_bounded(response)):
            return None
        if response == b"null":
            responses.append(None)
        elif call.response_metadata.finish_reason in _LENGTH_FINISH_REASONS:
            responses.append(orjson.loads(response))
        else:
            responses.append(UNREAD_RESPONSE)
    return EverydayRecord(record, responses)
