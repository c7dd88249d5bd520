"""``health.strict_schema`` against the pydantic contract it mirrors, value by value.

``test_fast_path`` compares digests; this compares what the fast path decoded with what the full
path validated, for every line the fast path vouches for: each typed field (type and value,
``2.0`` vs ``2`` and ``-0.0`` vs ``0.0`` apart), the raw payload spans, the free-form values
msgspec decodes, the identity keys and the materialized responses. It also checks that the
strict structs declare the contract's fields, defaults, literals and bounds, and that the
model-level rules agree with the contract's validators wherever the strict decode succeeds.
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import orjson
import pytest
from annotated_types import Ge
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

from health import fast_path
from health.contract import (
    AgentInvocation,
    ModelCallRef,
    ModelServerRef,
    ObservationGap,
    TrajectoryModelCall,
    TrajectoryRecord,
    TrajectoryResponseMetadata,
    TrajectoryTokenStats,
    TrajectoryToolCall,
    TrajectoryTurn,
    check_trajectory,
)
from health.contract.conversation import Conversation
from health.fast_path import UNREAD_RESPONSE, EverydayRecord, read_everyday_record
from health.strict_schema import (
    StrictCallRef,
    StrictGap,
    StrictInvocation,
    StrictModelCall,
    StrictResponseMetadata,
    StrictServerRef,
    StrictTokenStats,
    StrictToolCall,
    StrictTrajectory,
    StrictTurn,
    contract_rules_hold,
    decode_strict,
)
from tests.health.fast_path_support import (
    TEMPLATE,
    DrawChooser,
    KeyPath,
    RawJSON,
    SeededChooser,
    assert_paths_agree,
    base_record,
    corpus_rows,
    encode,
    mutated_line,
    pick,
    synthetic_corpus,
    with_changes,
    without_texts,
)
from tests.health.test_fast_path import (
    CALL,
    COERCIONS,
    DUPLICATE_KEYS,
    INVOCATION,
    METADATA,
    MODEL_RULES,
    TOKENS,
    TOOL,
    TURN,
    VALUE_EDGES,
)

PAIRS: list[tuple[type[msgspec.Struct], type[BaseModel]]] = [
    (StrictServerRef, ModelServerRef),
    (StrictCallRef, ModelCallRef),
    (StrictTurn, TrajectoryTurn),
    (StrictInvocation, AgentInvocation),
    (StrictResponseMetadata, TrajectoryResponseMetadata),
    (StrictTokenStats, TrajectoryTokenStats),
    (StrictModelCall, TrajectoryModelCall),
    (StrictToolCall, TrajectoryToolCall),
    (StrictGap, ObservationGap),
    (StrictTrajectory, TrajectoryRecord),
]
_MIRRORS = {strict: model for strict, model in PAIRS}
_CONVERSATION: TypeAdapter[list[Any]] = TypeAdapter(Conversation)

# --------------------------------------------------------------------------------------------
# The structs declare what the contract declares


def _walk_types(tp: Any) -> list[Any]:
    """``tp`` and every type argument and ``Annotated`` metadata inside it."""
    found = [tp]
    for arg in getattr(tp, "__metadata__", ()):
        found.append(arg)
    for arg in typing.get_args(tp):
        found += _walk_types(arg)
    return found


def _literals(tp: Any) -> frozenset[Any]:
    return frozenset(
        value
        for part in _walk_types(tp)
        if typing.get_origin(part) is typing.Literal
        for value in typing.get_args(part)
    )


def _strict_bound(tp: Any) -> Any:
    return next((part.ge for part in _walk_types(tp) if isinstance(part, msgspec.Meta)), None)


def _strict_default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default_factory is not msgspec.NODEFAULT:
        made = field.default_factory()
        return _MIRRORS[type(made)] if isinstance(made, msgspec.Struct) else made
    if isinstance(field.default, msgspec.Raw):
        return orjson.loads(bytes(field.default))
    return field.default


def _contract_default(field: Any) -> Any:
    return field.default_factory() if field.default_factory is not None else field.default


@pytest.mark.parametrize(("strict", "model"), PAIRS, ids=[model.__name__ for _, model in PAIRS])
def test_struct_mirrors_the_contract_model(strict: type[msgspec.Struct], model: type[BaseModel]) -> None:
    strict_fields = {field.name: field for field in msgspec.structs.fields(strict)}
    model_fields = model.model_fields
    assert set(strict_fields) == set(model_fields)
    forbids = strict.__struct_config__.forbid_unknown_fields
    assert forbids == (model.model_config.get("extra") == "forbid")
    for name, field in strict_fields.items():
        contract = model_fields[name]
        assert field.required == contract.is_required(), name
        if not field.required:
            default = _contract_default(contract)
            expected = type(default) if isinstance(default, BaseModel) else default
            assert _strict_default(field) == expected, name
        assert _literals(field.type) == _literals(contract.annotation), name
        bounds = [item.ge for item in contract.metadata if isinstance(item, Ge)]
        assert _strict_bound(field.type) == (bounds[0] if bounds else None), name


# --------------------------------------------------------------------------------------------
# Decoded values equal validated values


def _typed(value: Any) -> Any:
    """A comparable form in which ``1``, ``1.0``, ``True`` and ``0.0`` / ``-0.0`` all differ."""
    if value is None or value is msgspec.UNSET or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    raise AssertionError(f"unexpected decoded value {value!r}")


def _without_nulls(value: Any) -> Any:
    """``value`` with every null-valued object key dropped (an absent optional field and an
    explicit ``null`` are one thing to the contract)."""
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    return value


def _strict_python(value: Any) -> Any:
    """A strict struct as plain data: raw spans parsed (orjson), typed conversation items as the
    JSON objects they were decoded from, without null values."""
    if isinstance(value, StrictInvocation) and isinstance(value.conversation, list):
        fields = {field: _strict_python(getattr(value, field)) for field in value.__struct_fields__}
        items = without_texts(_without_nulls(msgspec.to_builtins(value.conversation)))
        return {**fields, "conversation": _typed(items)}
    if isinstance(value, msgspec.Struct):
        return {field: _strict_python(getattr(value, field)) for field in value.__struct_fields__}
    if isinstance(value, msgspec.Raw):
        return _typed(orjson.loads(bytes(value)))
    if isinstance(value, list):
        return [_strict_python(item) for item in value]
    return _typed(value)


def _strict_conversation(items: Any, strict: Any) -> Any:
    """The line's conversation, normalized as :func:`_strict_python` normalizes typed items
    (their free texts, which the fast path may leave undecoded, blanked on both sides)."""
    if isinstance(strict, StrictInvocation) and isinstance(strict.conversation, list):
        return without_texts(_without_nulls(items))
    return items


def _contract_python(
    trajectory: TrajectoryRecord, raw: dict[str, Any], strict_trajectory: StrictTrajectory
) -> Any:
    """The validated trajectory as plain data, with each conversation as the line holds it."""
    dumped: dict[str, Any] = _typed(trajectory.model_dump(mode="python", exclude={"invocations"}))
    dumped["invocations"] = [
        {
            **_typed(invocation.model_dump(mode="python", exclude={"conversation"})),
            "conversation": _typed(_strict_conversation(raw_invocation.get("conversation", []), strict)),
        }
        for invocation, raw_invocation, strict in zip(
            trajectory.invocations, raw.get("invocations", []), strict_trajectory.invocations, strict=True
        )
    ]
    return dumped


def _without_unread(trajectory: dict[str, Any]) -> dict[str, Any]:
    """A trajectory without the raw values the fast path never decodes: its calls' payloads (the
    responses it reads are compared as ``EverydayRecord.responses``), its turns' questions, its
    tool calls' outputs."""
    lean = dict(trajectory)
    lean["model_calls"] = [
        {name: value for name, value in call.items() if name not in ("request", "response")}
        for call in trajectory["model_calls"]
    ]
    for key, unread in (("turns", "question"), ("tool_calls", "output")):
        lean[key] = [
            {name: value for name, value in item.items() if name != unread} for item in trajectory[key]
        ]
    return lean


def _identity(record: dict[str, Any], key: str, absent: Any) -> Any:
    return _typed(record[key]) if key in record else absent


def assert_decoded_like_the_contract(line: bytes) -> EverydayRecord | None:
    """For a line the fast path vouches for: every value it decoded equals the full path's."""
    everyday = read_everyday_record(line.strip())
    if everyday is None:
        return None
    raw = orjson.loads(line)
    strict = everyday.record
    assert _typed(strict.task_index) == _identity(raw, "_ng_task_index", msgspec.UNSET)
    assert _typed(strict.rollout_index) == _identity(raw, "_ng_rollout_index", msgspec.UNSET)
    assert _typed(strict.stage_index) == _identity(raw, "stage_index", None)
    assert _typed(strict.rollout_id) == _identity(raw, "_ng_rollout_id", None)
    response = raw.get("response")
    assert response is None or isinstance(response, dict)
    usage = None if strict.response is None else {"usage": strict.response.usage}
    assert _typed(usage) == _typed(None if response is None else {"usage": response.get("usage")})
    if strict.ng_trajectory is None:
        assert raw.get("ng_trajectory") is None
        assert everyday.responses == []
        return everyday
    trajectory, error = check_trajectory(raw["ng_trajectory"])
    assert error is None and trajectory is not None, f"fast path vouched for an invalid trajectory: {line!r}"
    assert _without_unread(_strict_python(strict.ng_trajectory)) == _without_unread(
        _contract_python(trajectory, raw["ng_trajectory"], strict.ng_trajectory)
    )
    assert len(everyday.responses) == len(trajectory.model_calls)
    for materialized, call in zip(everyday.responses, trajectory.model_calls, strict=True):
        if call.response is None:
            assert materialized is None
        elif call.response_metadata.finish_reason in ("length", "max_tokens", "max_output_tokens"):
            assert _typed(materialized) == _typed(call.response)
        else:
            assert materialized is UNREAD_RESPONSE
    return everyday


def _template_lines() -> list[bytes]:
    lines = [TEMPLATE.render()]
    for _, raw, _ in VALUE_EDGES:
        for slot in ("skipped", "answer", "reasoning", "question", "request", "length_response"):
            lines.append(TEMPLATE.render(values={slot: raw}))
        lines.append(TEMPLATE.render().replace(b'"input_tokens":30', b'"input_tokens":' + raw))
        lines.append(TEMPLATE.render().replace(b'"_ng_task_index":3', b'"_ng_task_index":' + raw))
    for _, slot, where, pair in DUPLICATE_KEYS:
        lines.append(TEMPLATE.with_pair(slot, where, pair))
    for _, path, value in COERCIONS:
        lines.append(orjson.dumps(with_changes(base_record(), (path, value))))
    for _, changes, _ in MODEL_RULES:
        lines.append(orjson.dumps(with_changes(base_record(), *changes)))
    return lines


def test_template_variants_decode_like_the_contract() -> None:
    vouched = [assert_decoded_like_the_contract(line) is not None for line in _template_lines()]
    assert 0.3 * len(vouched) < sum(vouched) < len(vouched)


def test_synthetic_rows_decode_like_the_contract() -> None:
    vouched = [assert_decoded_like_the_contract(item.line) is not None for item in synthetic_corpus()]
    assert sum(vouched) >= len(vouched) - 6  # all but the invalid trajectories and torn lines


def test_seeded_mutations_decode_like_the_contract() -> None:
    rows = [*corpus_rows(), base_record()]
    vouched = 0
    for seed in range(2500):
        chooser = SeededChooser(10_000 + seed)
        line = mutated_line(chooser, pick(chooser, rows), 1 + chooser.index(3))
        vouched += assert_decoded_like_the_contract(line) is not None
    assert vouched > 150


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_rows_decode_like_the_contract(data: st.DataObject) -> None:
    chooser = DrawChooser(data)
    rows = [*corpus_rows(), base_record()]
    assert_decoded_like_the_contract(mutated_line(chooser, pick(chooser, rows), 1 + chooser.index(3)))


# --------------------------------------------------------------------------------------------
# The model-level rules agree with the contract's validators


def _conversation_items(conversation: Any) -> Any:
    """A strict invocation's conversation as JSON data: a raw span parsed, typed items encoded."""
    if isinstance(conversation, msgspec.Raw):
        return orjson.loads(bytes(conversation))
    return msgspec.to_builtins(conversation)


def _conversation_valid(items: Any) -> bool:
    try:
        _CONVERSATION.validate_python(items)
    except Exception:  # ValidationError, or TypeError while routing an unhashable type
        return False
    return True


def assert_rules_agree(line: bytes) -> bool | None:
    """Where the strict decode succeeds, its rules plus the conversation decide like the contract."""
    if not orjson_object(line):
        return None
    record = decode_strict(line.strip())
    if record is None or record.ng_trajectory is None:
        return None
    raw = orjson.loads(line)["ng_trajectory"]
    strict_valid = contract_rules_hold(record.ng_trajectory) and all(
        _conversation_valid(_conversation_items(invocation.conversation))
        for invocation in record.ng_trajectory.invocations
    )
    assert strict_valid == (check_trajectory(raw)[1] is None), line
    return strict_valid


def orjson_object(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def test_model_rules_agree_with_the_contract() -> None:
    outcomes = [assert_rules_agree(line) for line in _template_lines()]
    rows = [*corpus_rows(), base_record()]
    for seed in range(1000):
        chooser = SeededChooser(20_000 + seed)
        outcomes.append(assert_rules_agree(mutated_line(chooser, pick(chooser, rows), 1 + chooser.index(2))))
    assert outcomes.count(True) > 100
    assert outcomes.count(False) > 20  # rule violations the strict decode let through to the rules


# --------------------------------------------------------------------------------------------
# Number texts in every typed numeric field

NUMERIC_FIELDS: list[KeyPath] = [
    (*TURN, "turn_no"),
    (*TURN, "timestamp"),
    (*TURN, "step_count"),
    (*INVOCATION, "duration_ms"),
    (*CALL, "started_at"),
    (*CALL, "completed_at"),
    (*CALL, "duration_ms"),
    (*METADATA, "status_code"),
    (*METADATA, "upstream_status_code"),
    (*METADATA, "latency_ttft_ms"),
    (*TOKENS, "prompt_tokens"),
    (*TOKENS, "completion_tokens"),
    (*TOKENS, "cached_tokens"),
    (*TOOL, "started_at"),
    (*TOOL, "completed_at"),
    (*TOOL, "duration_ms"),
]
NUMBER_TEXTS = [
    b"-0",
    b"0",
    b"-0.0",
    b"0.0",
    b"0e5",
    b"1",
    b"1.0",
    b"1e0",
    b"10e-1",
    b"1E2",
    b"2.5",
    b"9007199254740993",
    b"18446744073709551615",
    b"-9223372036854775808",
    b"123456789012345678901234567890",
    b"1e-400",
    b"4.9e-324",
    b"1.7976931348623157e308",
    b"0.1000000000000000055511151231257827021181583404541015625",
]


@pytest.mark.parametrize("path", NUMERIC_FIELDS, ids=lambda path: "/".join(map(str, path[1:])))
def test_number_texts_in_typed_fields(path: KeyPath) -> None:
    """Ints in float fields become the contract's floats; anything the strict types refuse defers."""
    vouched = 0
    for text in NUMBER_TEXTS:
        line = encode(with_changes(base_record(), (path, RawJSON(text))))
        assert_paths_agree(line)
        vouched += assert_decoded_like_the_contract(line) is not None
    assert vouched >= 3


# --------------------------------------------------------------------------------------------
# Strings written with every kind of escape


@st.composite
def json_strings(draw: st.DrawFn) -> tuple[str, bytes]:
    """A string and one of its JSON spellings: raw UTF-8, ``\\uXXXX`` (either case, surrogate
    pairs for astral characters) or short escapes, chosen per character."""
    text = draw(st.text(st.characters(exclude_categories=["Cs"]), max_size=12))
    out = []
    for char in text:
        code = ord(char)
        style = draw(st.integers(0, 3))
        if code > 0xFFFF and style:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            out.append(
                (f"\\u{high:04x}\\u{low:04X}" if style == 1 else f"\\u{high:04X}\\u{low:04x}").encode()
            )
        elif style == 1 or code < 0x20 or char in '"\\':
            out.append(orjson.dumps(char)[1:-1] if style == 2 else f"\\u{code:04x}".encode())
        elif style == 2 and code <= 0xFFFF:
            out.append(f"\\u{code:04X}".encode())
        else:
            out.append(char.encode())
    return text, b'"' + b"".join(out) + b'"'


@settings(max_examples=300, deadline=None)
@given(spelled=json_strings(), slot=st.sampled_from(["answer", "gap_detail", "text", "skipped"]))
def test_escaped_strings_decode_like_orjson(spelled: tuple[str, bytes], slot: str) -> None:
    text, raw = spelled
    assert orjson.loads(raw) == text
    line = TEMPLATE.render(values={slot: raw})
    assert assert_paths_agree(line)
    assert assert_decoded_like_the_contract(line) is not None
    for spliced in (
        TEMPLATE.render(head={"top": b'"_ng_rollout_id":' + raw}),  # identity text
        TEMPLATE.render(tail={"metadata": b'"finish_reason":' + raw}),  # a typed string
    ):
        assert assert_paths_agree(spliced)
        assert assert_decoded_like_the_contract(spliced) is not None


# --------------------------------------------------------------------------------------------
# Conversations outside the typed everyday items: the record is decoded again, spans kept raw

_MCP_LISTING = {"type": "mcp_list_tools", "id": "l1", "server_label": "s", "tools": []}


def test_a_conversation_outside_the_typed_items_is_decoded_as_plain_values() -> None:
    record = with_changes(base_record(), ((*INVOCATION, "conversation"), [_MCP_LISTING]))
    decoded = decode_strict(orjson.dumps(record))
    assert decoded is not None and decoded.ng_trajectory is not None
    assert decoded.typed_conversations is False
    assert decoded.ng_trajectory.invocations[0].conversation == [_MCP_LISTING]
    assert assert_paths_agree(orjson.dumps(record))
    typed = [{"type": "message", "role": "user", "content": "hello"}]
    everyday_line = orjson.dumps(with_changes(base_record(), ((*INVOCATION, "conversation"), typed)))
    everyday = decode_strict(everyday_line)
    assert everyday is not None and everyday.ng_trajectory is not None
    assert everyday.typed_conversations is True
    assert _strict_python(everyday.ng_trajectory.invocations[0]) != _strict_python(
        decoded.ng_trajectory.invocations[0]
    )
    plain = decode_strict(everyday_line, typed_conversations=False)
    assert plain is not None and plain.typed_conversations is False
    assert _strict_python(plain) == _strict_python(everyday)


def test_a_value_outside_the_subset_is_refused_wherever_it_lies() -> None:
    """The span decode is tried only when the first refused value is inside a conversation; it
    must refuse a record whose other values fall outside the subset either way."""
    outside = ((*TURN, "turn_no"), 0)
    before = with_changes(base_record(), outside, ((*INVOCATION, "conversation"), [_MCP_LISTING]))
    assert decode_strict(orjson.dumps(before)) is None
    assert decode_strict(orjson.dumps(with_changes(base_record(), outside))) is None
    after = with_changes(
        base_record(), ((*INVOCATION, "conversation"), [_MCP_LISTING]), ((*CALL, "duration_ms"), -1)
    )
    assert decode_strict(orjson.dumps(after)) is None


def test_the_decode_order_follows_the_run_and_never_changes_a_digest() -> None:
    """Typed items first, except within a streak of records that needed plain items (messages
    without ``type`` here), where every 16th record tries them again; digests agree anyway."""
    untyped = orjson.dumps(
        with_changes(base_record(), ((*INVOCATION, "conversation"), [{"role": "user", "content": "hi"}]))
    )
    typed = orjson.dumps(
        with_changes(
            base_record(),
            ((*INVOCATION, "conversation"), [{"type": "message", "role": "user", "content": "hi"}]),
        )
    )
    order = fast_path._decode_order
    read = fast_path.read_everyday_record
    try:
        order.plain_streak = 0
        assert order.typed_first()
        assert read(untyped) is not None
        assert order.plain_streak == 1 and not order.typed_first()
        assert read(typed) is not None  # decoded plain within the streak
        for _ in range(13):
            assert read(untyped) is not None
        assert order.plain_streak == 15 and not order.typed_first()
        assert read(untyped) is not None
        assert order.typed_first()
        assert read(typed) is not None
        assert order.plain_streak == 0
        for streak in (0, 1, 16):
            for line in (typed, untyped):
                order.plain_streak = streak
                assert assert_paths_agree(line)
    finally:
        order.plain_streak = 0
