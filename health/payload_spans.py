"""The strict decode of a vetted line, without msgspec reading the payloads it would only skip.

msgspec reads every byte of a value it skips or keeps raw, and most of a rollout line is the
captured calls' ``request`` / ``response`` payloads (kept raw) plus top-level values the
strict schema does not name and the top-level ``response``'s members but ``usage``
(skipped). The native scan (:mod:`health._payload_spans`, built from C when a compiler was
present at install) copies the line with each of those values replaced by ``0``, in a pass
several times cheaper than msgspec's skip, and returns each call's payloads as ``Raw``
slices of the line (no copy); the copy is decoded and each call's payloads are put back.

Why it decodes the same record as the line itself:

* only values msgspec keeps as ``Raw`` (which accepts any JSON value) or skips (an unknown key
  of a struct that allows them) are replaced, so the copy fails or passes every typed field
  exactly where the line does, with the same error path;
* the scan hands back the payloads of the calls msgspec keeps: for a repeated key msgspec
  keeps the last value, and so does the scan, at each level of the path
  (``tests/health/test_payload_spans.py`` pins that behaviour of msgspec);
* keys on the path are compared byte for byte, so the scan gives up (and the line is decoded
  itself) where one holds an escape, which could spell a field name in other bytes.

Where the extension is not built (or ``ROLLOUT_SIDECAR_NATIVE=0`` turns it off,
:mod:`health.native`), or the scan gives up, :func:`decode_strict_skipping_payloads`
is :func:`health.strict_schema.decode_strict` on the line.

A line not yet vetted goes through :func:`decode_strict_if_vetted`: the native vetter
(:func:`health._json_vet.vet_compact`) makes the same copy in its own pass over the line, so
the line is read once before the decode of its copy, not twice.

The batch fast path decodes the vetter's lean copy instead (:func:`decode_strict_lean`,
``health._json_vet.vet_lean``), where conversations are decoded as typed items first. It also
leaves out what the fast path never reads: each free text of the conversations (a string under
one of ``health._json_vet.TEXT_KEYS``) is ``""``, so msgspec never builds those strings; each
turn's ``question`` and tool call's ``output`` (kept raw) is ``0``; no payload is put back: a
call's ``request`` stays the copy's ``0``, its ``response`` too, or ``null`` where the line holds
null, and the response's place in the line is handed back for the few the fast path parses.
Every typed field of those names accepts any text alike (checked at import by
:func:`~health.strict_conversation.text_fields_free`), so the typed decode gives the same
answer, and the same record but for those values. Where the typed decode refuses the lean
copy outside a conversation, the full copy fails at the same value, and :mod:`health.rejection`
reads the lean copy (it reads conversations only for the types of their values); where it
refuses a conversation, the plain retry decodes the full copy.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Final, Literal, NamedTuple

from msgspec import Raw

from .json_vet import vet
from .native import native_allowed
from .strict_conversation import text_fields_free
from .strict_schema import StrictRecord, TypedRefusal, decode_strict, decode_strict_typed

__all__ = [
    "NATIVE",
    "NOT_JSON",
    "LeanDecode",
    "NotJson",
    "decode_strict_from_copy",
    "decode_strict_if_vetted",
    "decode_strict_if_vetted_from_copy",
    "decode_strict_lean",
    "decode_strict_skipping_payloads",
    "response_span",
]

_Payloads = tuple["Raw | None", ...]
_Copy = tuple[bytes, _Payloads, _Payloads]
_Compact = Callable[[bytes | memoryview], "_Copy | None"]
_VetCompact = Callable[[bytes | memoryview, int], "_Copy | Literal[False] | None"]
_VetLean = Callable[[bytes | memoryview, int], "tuple[bytes, bytes] | Literal[False] | None"]
_SPAN = struct.Struct("=qq")
"""A call's (start, end) response offsets in the lean copy's ``responses``."""


def _in_step_with_the_schema(kept_top_level_keys: tuple[str, ...]) -> bool:
    """A native scan built with other top-level fields than the record's would cut a member
    the record decodes: such a build is not used. Both extensions export the one list
    compiled from ``health/_strict_paths.h``; each build is checked on its own."""
    return set(kept_top_level_keys) == set(StrictRecord.__struct_encode_fields__)


_compact: _Compact | None = None
_vet_compact: _VetCompact | None = None
_vet_lean: _VetLean | None = None
if native_allowed():  # ROLLOUT_SIDECAR_NATIVE=0 turns it off (health.native)
    try:
        from ._payload_spans import KEPT_TOP_LEVEL_KEYS
        from ._payload_spans import compact as _compact
    except ImportError:  # see setup.py
        _compact = None
    else:
        if not _in_step_with_the_schema(KEPT_TOP_LEVEL_KEYS):
            _compact = None
    try:
        from ._json_vet import KEPT_TOP_LEVEL_KEYS as _VETTER_KEPT_KEYS
        from ._json_vet import TEXT_KEYS as _VETTER_TEXT_KEYS
        from ._json_vet import vet_compact as _vet_compact
        from ._json_vet import vet_lean as _vet_lean
    except ImportError:  # see setup.py
        _vet_compact = _vet_lean = None
    else:
        if not _in_step_with_the_schema(_VETTER_KEPT_KEYS):
            _vet_compact = _vet_lean = None
        elif not text_fields_free(_VETTER_TEXT_KEYS):
            _vet_lean = None

NATIVE: Final = _compact is not None
"""Whether the native scan is built (else the strict decode reads every line whole)."""

LEAN: Final = _vet_lean is not None
"""Whether :func:`decode_strict_lean` decodes the lean copy (see the module notes)."""


class NotJson(enum.Enum):
    """:func:`decode_strict_if_vetted`'s answer for a line the vetter refuses."""

    REFUSED = "refused"


NOT_JSON: Final = NotJson.REFUSED


def decode_strict_if_vetted(
    data: bytes, max_depth: int, *, typed_conversations: bool = True
) -> StrictRecord | NotJson | None:
    """:data:`NOT_JSON` where :func:`health.json_vet.vet` refuses ``data`` at ``max_depth``,
    else :func:`decode_strict_skipping_payloads` of it (the same record, or ``None``). With
    the native vetter built, one pass over the line vets it and makes the copy."""
    return decode_strict_if_vetted_from_copy(data, max_depth, typed_conversations=typed_conversations)[0]


def decode_strict_if_vetted_from_copy(
    data: bytes | memoryview, max_depth: int, *, typed_conversations: bool = True
) -> tuple[StrictRecord | NotJson | None, bytes | memoryview]:
    """:func:`decode_strict_if_vetted`, also handing back the bytes it decoded last: the copy
    without payloads, or ``data`` itself where no copy was made (or the copy's calls
    disagreed). For a line the strict decode refuses, the copy differs from ``data`` only in the
    payloads and skipped values listed in the module notes, each replaced by ``0``, so a caller
    that reads none of them may decode it instead of the line (:mod:`health.rejection` does)."""
    if _vet_compact is None:
        if not vet(data, max_depth):
            return NOT_JSON, data
        return decode_strict_from_copy(data, typed_conversations=typed_conversations)
    found = _vet_compact(data, max_depth)
    if found is False:
        return NOT_JSON, data
    return _decode_copy(data, found, typed_conversations)


class LeanDecode(NamedTuple):
    """:func:`decode_strict_lean`'s answer."""

    record: StrictRecord | NotJson | None
    """As :func:`decode_strict_if_vetted` gives it, but for the values the lean copy leaves out."""
    decoded: bytes | memoryview
    """The bytes decoded last, as :func:`decode_strict_if_vetted_from_copy` hands them back."""
    responses: bytes | None
    """Where the record came from the lean copy: its calls' response offsets in the line
    (:func:`response_span`); ``None`` where its calls hold their payloads."""


def decode_strict_lean(
    data: bytes | memoryview, max_depth: int, *, typed_conversations: bool = True
) -> LeanDecode:
    """:func:`decode_strict_if_vetted_from_copy` for the batch fast path: from the lean copy
    (module notes) where the native vetter is built and conversations are tried as typed items
    first, else as that function decodes."""
    if not (typed_conversations and _vet_lean is not None):
        return LeanDecode(
            *decode_strict_if_vetted_from_copy(data, max_depth, typed_conversations=typed_conversations), None
        )
    found = _vet_lean(data, max_depth)
    if found is False:
        return LeanDecode(NOT_JSON, data, None)
    if found is None:
        return LeanDecode(*_decode_copy(data, None, typed_conversations), None)
    copy, responses = found
    record = decode_strict_typed(copy)
    if record is TypedRefusal.OUTSIDE_SUBSET:
        # the full copy stops at the same value (the lean one differs only in values any type
        # that reads them accepts alike), and the rejection reads none of what it leaves out
        return LeanDecode(None, copy, None)
    if record is not TypedRefusal.CONVERSATION and (
        record.ng_trajectory is None or len(record.ng_trajectory.model_calls) * _SPAN.size == len(responses)
    ):
        return LeanDecode(record, copy, responses)
    # conversation items to decode as plain values (which the lean copy blanks), or calls the
    # scan and msgspec disagree on: decided from the full copy
    return LeanDecode(
        *_decode_copy(data, None if _compact is None else _compact(data), typed_conversations), None
    )


def response_span(responses: bytes, index: int) -> tuple[int, int]:
    """The (start, end) offsets in the line of call ``index``'s response, from
    :attr:`LeanDecode.responses` (``(-1, -1)``: the record holds none)."""
    start, end = _SPAN.unpack_from(responses, _SPAN.size * index)
    return start, end


def decode_strict_skipping_payloads(data: bytes, *, typed_conversations: bool = True) -> StrictRecord | None:
    """:func:`~health.strict_schema.decode_strict` of ``data``, which must be vetted JSON
    (:mod:`health.json_vet`): the same record, or ``None`` for the same lines."""
    return decode_strict_from_copy(data, typed_conversations=typed_conversations)[0]


def decode_strict_from_copy(
    data: bytes | memoryview, *, typed_conversations: bool = True
) -> tuple[StrictRecord | None, bytes | memoryview]:
    """:func:`decode_strict_skipping_payloads`, also handing back the bytes it decoded last
    (see :func:`decode_strict_if_vetted_from_copy`)."""
    return _decode_copy(data, None if _compact is None else _compact(data), typed_conversations)


def _decode_copy(
    data: bytes | memoryview, found: _Copy | None, typed_conversations: bool
) -> tuple[StrictRecord | None, bytes | memoryview]:
    """The strict decode of the line ``data`` from its copy (``None``: from the line itself),
    and the bytes it decoded last."""
    if found is None:
        return decode_strict(data, typed_conversations=typed_conversations), data
    copy, requests, responses = found
    record = decode_strict(copy, typed_conversations=typed_conversations)
    if record is None or record.ng_trajectory is None:
        return record, copy
    calls = record.ng_trajectory.model_calls
    if len(calls) != len(requests):  # never expected: the scan and msgspec disagree on the calls
        return decode_strict(data, typed_conversations=typed_conversations), data
    for call, request, response in zip(calls, requests, responses, strict=True):
        if request is not None:
            call.request = request
        if response is not None:
            call.response = response
    return record, copy
