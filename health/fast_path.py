"""The batch fast path: one JSONL line to the rollout checks' inputs, without building the payloads.

The reference parses every line completely (orjson) and validates the trajectory with
pydantic. Most of those bytes are the captured calls' ``request`` / ``response`` payloads,
which no check reads unless a call stopped for length. :func:`read_everyday_record` reaches
the same inputs in two C passes and a little Python, for the records that are plainly valid:

1. **The line is JSON exactly when orjson says so.** :func:`health.json_vet.vet` accepts a
   document only if orjson parses it to the values msgspec decodes (UTF-8, escapes and
   surrogates, number syntax and range, integers within 64 bits, nesting) and it nests at most
   a given number of containers; it reads the line in place, and in the same pass makes the
   copy of step 3 (:func:`health.payload_spans.decode_strict_if_vetted`). (Where the native
   vetter is not built, simdjson stands in, refusing a little more.) A leading UTF-8 BOM, which orjson
   refuses, is ruled out by the required leading ``{``. ``tests/health/test_fast_path.py``
   and ``tests/health/test_json_vet.py`` hold the edge cases.
2. **The canonical dump cannot fail.** It fails only on a free-form value nested more than
   253 levels (see ``health.digest``). Every free-form value sits at least 4 levels below the
   record's root (``ng_trajectory`` / ``model_calls`` / a call / ``request``), so a record at
   most 257 containers deep is safe, and that bound is vetted in the same pass.
3. **The trajectory is valid exactly when the contract says so** for the strict subset
   decoded by :mod:`health.strict_schema` (from a copy of the line without its payloads
   where :mod:`health.payload_spans` can make one: the same record, cheaper). A conversation
   is first decoded by the typed everyday-item structs of :mod:`health.strict_conversation`;
   one they do not vouch for is decoded generically and goes through the contract's own
   code: its everyday-item recogniser, then its acceptance-only recogniser (the same shapes
   with plain token metadata or empty log-probs, as RL rollouts write them), else its full
   item union (other training items, output text with log-probs, tool items ...). Items the
   union keeps as models keep free-form values; for those the full path's sufficient depth
   condition is applied as is.

Whenever a step cannot prove its point it returns ``None`` and the caller runs the full path
(orjson + pydantic), which decides. The one exception, :func:`read_stripped_line`, hands a line
the strict decode refuses to :mod:`health.rejection`, which may prove the trajectory invalid.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson
from msgspec import Raw

from .checks import LENGTH_FINISH_REASONS
from .contract._conversation._fast import canonical_list_accepts, everyday_list_valid
from .json_vet import vet
from .payload_spans import NOT_JSON, NotJson, decode_strict_from_copy, decode_strict_lean, response_span
from .rejection import RejectedRecord, read_rejected_record
from .strict_conversation import everyday_items_ok
from .strict_schema import StrictRecord, StrictTrajectory, contract_rules_hold

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["UNREAD_RESPONSE", "EverydayRecord", "read_everyday_record", "read_stripped_line"]

_MAX_RECORD_DEPTH = 257
"""253 levels for a free-form value (the dump's limit) plus the 4 levels above the shallowest one."""
_NULL = Raw(b"null")


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


@functools.cache
def _conversation_adapter() -> TypeAdapter[list[Any]]:
    """The contract's conversation validator, built on first use: the everyday recognisers
    vouch for most lists, so a worker often never needs the pydantic models."""
    from pydantic import TypeAdapter

    from .contract.conversation import Conversation

    return TypeAdapter(Conversation)


def _is_shallow_json_for_orjson(data: bytes | memoryview) -> bool:
    """True only if orjson would parse ``data`` to the values msgspec decodes, and it is an
    object at most 257 containers deep (see the module notes): step 1 alone, as
    ``benchmarks/record_step.py --stages`` times it."""
    return data[:1] == b"{" and vet(data, _MAX_RECORD_DEPTH)


def _conversation_vouched(items: list[Any]) -> bool:
    """The contract accepts ``items`` and their canonical dump cannot fail.

    Everyday items become plain strings in the dump, and the items ``everyday_list_valid``
    also vouches for (token metadata, empty log-probs) hold only strings, numbers and shallow
    lists: neither needs a depth check. Items the union validates into models may keep
    free-form values, and the full path rules out a failing dump only if the whole
    invocation is at most 253 levels deep (``health.digest._free_form_values``): the line
    bound leaves it one level more, so that condition is checked here (``[[items]]`` stands
    for the list around the invocation and the invocation itself; the invocation's other
    fields are shallow).
    """
    if canonical_list_accepts(items) or everyday_list_valid(items):
        return True
    try:
        _conversation_adapter().validate_python(items)
        orjson.dumps([[items]])
    except Exception:  # invalid (ValidationError, or TypeError while routing) or too deep: defer
        return False
    return True


_RETRY_TYPED_EVERY = 16


class _DecodeOrder:
    """Whether the strict decode tries typed conversation items first: always, except after a
    record that needed its items as plain values, when only every 16th record of such a
    streak does. Both orders decode the same records to the same values; the order only
    spares the decode that fails, in runs whose conversations hold other items (such as
    messages without ``type``)."""

    __slots__ = ("plain_streak",)

    def __init__(self) -> None:
        self.plain_streak = 0

    def typed_first(self) -> bool:
        return self.plain_streak % _RETRY_TYPED_EVERY == 0

    def saw(self, record: StrictRecord) -> None:
        if record.ng_trajectory is not None:
            self.plain_streak = 0 if record.typed_conversations else self.plain_streak + 1


_decode_order = _DecodeOrder()


def _conversations_vouched(record: StrictRecord, trajectory: StrictTrajectory) -> bool:
    """Every conversation of the record: typed everyday items (any the message rules do not
    vouch for defer to the full path), or plain items (:func:`_conversation_vouched`)."""
    if record.typed_conversations:
        return all(everyday_items_ok(invocation.conversation) for invocation in trajectory.invocations)
    return all(
        _conversation_vouched(invocation.conversation)
        for invocation in trajectory.invocations
        if invocation.conversation
    )


def read_everyday_record(data: bytes, *, shallow_json: bool = False) -> EverydayRecord | None:
    """The checks' inputs for a stripped JSONL line, or ``None`` to take the full path.

    ``shallow_json``: the caller has already shown what step 1 shows (``data`` is vetted JSON,
    an object at most 257 containers deep, e.g. as part of a larger document it vetted), so
    that pass is skipped.
    """
    outcome = _read(data, shallow_json=shallow_json, rejections=False)
    return outcome if isinstance(outcome, EverydayRecord) else None


def read_stripped_line(
    data: bytes | memoryview, *, shallow_json: bool = False
) -> EverydayRecord | RejectedRecord | None:
    """:func:`read_everyday_record`, or, for a line that fails the strict decode, the
    :class:`~health.rejection.RejectedRecord` whose trajectory surely fails validation."""
    return _read(data, shallow_json=shallow_json, rejections=True)


def _read(
    data: bytes | memoryview, *, shallow_json: bool, rejections: bool
) -> EverydayRecord | RejectedRecord | None:
    if data[:1] != b"{":
        return None
    typed_first = _decode_order.typed_first()
    record: StrictRecord | NotJson | None
    responses: bytes | None = None
    if shallow_json:
        record, decoded = decode_strict_from_copy(data, typed_conversations=typed_first)
    else:  # steps 1 and 3 share one pass over the line (see health.payload_spans)
        record, decoded, responses = decode_strict_lean(
            data, _MAX_RECORD_DEPTH, typed_conversations=typed_first
        )
        if record is NOT_JSON:
            return None
    if record is None:  # the rejection reads no value the payload-free copy cuts out
        return read_rejected_record(decoded) if rejections else None
    _decode_order.saw(record)
    return _vouched(record, data, responses)


def _vouched(
    record: StrictRecord, data: bytes | memoryview, responses_at: bytes | None
) -> EverydayRecord | None:
    """The everyday record, if the contract's rules hold. ``responses_at``: where the record
    came from the lean copy, its calls' response offsets in ``data`` (their payloads are not in
    the record; the checks parse the few cut off at a length limit)."""
    trajectory = record.ng_trajectory
    if trajectory is None:
        return EverydayRecord(record, [])
    if not contract_rules_hold(trajectory):
        return None
    if not _conversations_vouched(record, trajectory):
        return None
    responses: list[Any] = []
    for index, call in enumerate(trajectory.model_calls):
        response = call.response
        if response == _NULL:
            responses.append(None)
        elif call.response_metadata.finish_reason in LENGTH_FINISH_REASONS:  # the checks read these
            payload: Raw | bytes | memoryview = response
            if responses_at is not None:
                start, end = response_span(responses_at, index)
                payload = data[start:end]
            responses.append(orjson.loads(bytes(payload)))
        else:
            responses.append(UNREAD_RESPONSE)
    return EverydayRecord(record, responses)
