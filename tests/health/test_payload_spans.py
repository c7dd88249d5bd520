"""``health.payload_spans``: decoding the copy without payloads gives the line's own strict decode.

The invariant: for every vetted line, :func:`decode_strict_skipping_payloads` equals
:func:`health.strict_schema.decode_strict` of the line (the same record, payloads included as
the same bytes, or ``None`` for both), in both conversation forms, and so does the vetter's
copy (:func:`decode_strict_if_vetted`); its lean copy (:func:`decode_strict_lean`) gives the
same but for what the fast path never reads of a record decoded with typed items: its
conversations' free texts (``""``), its turns' questions, its tool calls' outputs and its
calls' payloads (each response's place in the line handed back instead). Lines are generated around
the places the native scan cuts: repeated keys at and around them, escaped keys, quotes,
backslashes and brackets inside payload strings, payloads of every JSON kind, nested up to
the depth the fast path vets, odd whitespace; plus mutated synthetic rows.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from health import payload_spans
from health.json_vet import vet
from health.payload_spans import (
    NOT_JSON,
    decode_strict_if_vetted,
    decode_strict_if_vetted_from_copy,
    decode_strict_lean,
    decode_strict_skipping_payloads,
    response_span,
)
from health.rejection import read_rejected_record
from health.strict_schema import (
    _NULL,
    StrictModelCall,
    StrictRecord,
    StrictTrajectory,
    _PlainRecord,
    decode_strict,
)

from .fast_path_support import (
    DrawChooser,
    DupObject,
    RawJSON,
    SeededChooser,
    base_record,
    corpus_rows,
    encode,
    mutated_line,
    pick,
    without_texts,
)

try:
    from health._payload_spans import KEPT_TOP_LEVEL_KEYS, _use_avx2, compact
except ImportError:
    compact = None  # type: ignore[assignment]
    KEPT_TOP_LEVEL_KEYS = ()  # type: ignore[misc]
try:
    from health._json_vet import KEPT_TOP_LEVEL_KEYS as VETTER_KEPT_KEYS
    from health._json_vet import TEXT_KEYS, vet_compact, vet_lean
except ImportError:
    vet_compact = None  # type: ignore[assignment]
    VETTER_KEPT_KEYS = ()  # type: ignore[misc]

needs_native = pytest.mark.skipif(
    compact is None, reason="health._payload_spans is not built (no C compiler at install; see setup.py)"
)

_VETTED_DEPTH = 257
"""What the fast path vets a line to before the strict decode (``health.fast_path``)."""


def _record_bytes(record: StrictRecord | None) -> bytes | None:
    """A record as JSON: every field, the raw payloads written verbatim."""
    return None if record is None else msgspec.json.encode(record)


def _scanned(line: bytes) -> Any:
    """What the scan returns, payloads as bytes."""
    return _as_bytes(compact(line))


def _vetted_and_scanned(line: bytes) -> Any:
    """What the vetter's own pass returns (False: refused), payloads as bytes."""
    found = vet_compact(line, _VETTED_DEPTH)
    return False if found is False else _as_bytes(found)


def _without_unread(record: StrictRecord | None) -> Any:
    """A record as JSON values without what the vetter's lean copy may leave out: its
    conversations' free texts (blanked), its calls' payloads, its turns' questions and its tool
    calls' outputs."""
    if record is None:
        return None
    value = orjson.loads(_record_bytes(record) or b"null")
    trajectory = value.get("ng_trajectory") or {}
    for invocation in trajectory.get("invocations", []):
        invocation["conversation"] = without_texts(invocation.get("conversation"))
    for key, unread in (("turns", "question"), ("tool_calls", "output")):
        for element in trajectory.get(key, []):
            element.pop(unread)
    for call in trajectory.get("model_calls", []):
        call.pop("request")
        call.pop("response")
    return value, record.typed_conversations


def assert_same_lean_decode(line: bytes, want: StrictRecord | None, typed: bool) -> None:
    """The lean decode: ``want`` but for what it leaves out, every response at its place."""
    lean = decode_strict_lean(line, _VETTED_DEPTH, typed_conversations=typed)
    assert lean.record is not NOT_JSON
    if lean.responses is None:
        assert lean.record == want, line[:300]
        assert _record_bytes(lean.record) == _record_bytes(want), line[:300]
        if want is None:  # the rejection reads the copy it was refused from: the same answer
            full_copy = decode_strict_if_vetted_from_copy(line, _VETTED_DEPTH, typed_conversations=typed)[1]
            assert read_rejected_record(lean.decoded) == read_rejected_record(full_copy), line[:300]
        return
    assert want is not None and lean.record is not None, line[:300]
    assert _without_unread(lean.record) == _without_unread(want), line[:300]
    wanted_calls = [] if want.ng_trajectory is None else want.ng_trajectory.model_calls
    lean_calls = [] if lean.record.ng_trajectory is None else lean.record.ng_trajectory.model_calls
    for index, (wanted, found) in enumerate(zip(wanted_calls, lean_calls, strict=True)):
        start, end = response_span(lean.responses, index)
        if wanted.response == _NULL:  # absent or null: the record holds none
            assert (start, end, found.response) == (-1, -1, _NULL), line[:300]
        else:
            assert line[start:end] == bytes(wanted.response) and found.response != _NULL, line[:300]


def _as_bytes(found: Any) -> Any:
    if found is None:
        return None
    copy_, requests, responses = found
    return (
        copy_,
        [None if r is None else bytes(r) for r in requests],
        [None if r is None else bytes(r) for r in responses],
    )


def _scanned_by_the_baseline_loop(line: bytes) -> Any:
    """The same, with the SSE2 / portable container loop (what CPUs without AVX2 run)."""
    was_on = _use_avx2(False)
    try:
        return _scanned(line)
    finally:
        _use_avx2(was_on)


def assert_same_decode(line: bytes) -> bool:
    """The invariant, for a line the fast path would decode. Returns whether it was vetted.
    The vetter's pass (``vet_compact``) refuses what ``vet`` refuses and copies as the scan does."""
    vetted = vet(line, _VETTED_DEPTH)
    if vet_compact is not None:
        assert _vetted_and_scanned(line) == (_scanned(line) if vetted else False), line[:300]
    if not vetted:
        assert decode_strict_if_vetted(line, _VETTED_DEPTH) is NOT_JSON, line[:300]
    if not (line[:1] == b"{" and vetted):
        return False
    if compact is not None:
        assert _scanned(line) == _scanned_by_the_baseline_loop(line), line[:300]
    for typed in (True, False):
        want = decode_strict(line, typed_conversations=typed)
        got = decode_strict_skipping_payloads(line, typed_conversations=typed)
        assert got == want, line[:300]
        assert _record_bytes(got) == _record_bytes(want), line[:300]
        fused = decode_strict_if_vetted(line, _VETTED_DEPTH, typed_conversations=typed)
        assert fused == want, line[:300]
        assert _record_bytes(fused) == _record_bytes(want), line[:300]
        assert_same_lean_decode(line, want, typed)
    return True


# --------------------------------------------------------------------------------------------
# What the scan relies on


@needs_native
def test_kept_keys_are_the_strict_records_fields() -> None:
    assert KEPT_TOP_LEVEL_KEYS == VETTER_KEPT_KEYS  # both builds compile health/_strict_paths.h
    for record_type in (StrictRecord, _PlainRecord):
        assert set(record_type.__struct_encode_fields__) == set(KEPT_TOP_LEVEL_KEYS)
        assert set(record_type.__struct_encode_fields__) == set(VETTER_KEPT_KEYS)


@needs_native
def test_the_fast_path_uses_the_scan_when_it_is_built() -> None:
    """A kept-key list out of step with the record turns the scan off (never cuts a field);
    a build in step must keep it on, or the speed is silently lost."""
    from health import payload_spans

    assert payload_spans.NATIVE
    assert payload_spans._vet_compact is not None


def test_msgspec_keeps_the_last_value_of_a_repeated_key() -> None:
    """The scan hands back the last payload of each repeated key on the path, as msgspec keeps it."""
    call = msgspec.json.decode(
        b'{"request":1,"response":[2],"request":{"a":3},"response":null}', type=StrictModelCall
    )
    assert (bytes(call.request), bytes(call.response)) == (b'{"a":3}', b"null")
    trajectory = msgspec.json.decode(
        b'{"task_id":"t","rollout_id":"r","model_calls":[{"request":1}],"model_calls":[{},{"response":2}]}',
        type=StrictTrajectory,
    )
    assert [bytes(c.response) for c in trajectory.model_calls] == [b"null", b"2"]
    record = msgspec.json.decode(
        b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","model_calls":[{}]},'
        b'"ng_trajectory":{"task_id":"t","rollout_id":"r"}}',
        type=StrictRecord,
    )
    assert record.ng_trajectory is not None and record.ng_trajectory.model_calls == []


@needs_native
def test_the_copy_leaves_out_the_payloads_and_skipped_values() -> None:
    line = (
        b'{"extra":{"big":"x}"},"_ng_task_index":1,"response":{"id":"x","usage":{"a":1}},'
        b'"ng_trajectory":{"task_id":"t","rollout_id":"r",'
        b'"model_calls":[{"request":{"q":"\\"]"},"response":null,"model_call_id":"c"},{"model_call_id":"d"}]}}'
    )
    found = compact(line)
    assert found is not None
    copy_, requests, responses = found
    assert copy_ == (
        b'{"extra":0,"_ng_task_index":1,"response":{"id":0,"usage":{"a":1}},'
        b'"ng_trajectory":{"task_id":"t","rollout_id":"r",'
        b'"model_calls":[{"request":0,"response":0,"model_call_id":"c"},{"model_call_id":"d"}]}}'
    )
    assert [None if r is None else bytes(r) for r in requests] == [b'{"q":"\\"]"}', None]
    assert [None if r is None else bytes(r) for r in responses] == [b"null", None]
    assert_same_decode(line)


@needs_native
@pytest.mark.parametrize("loop", [_scanned, _scanned_by_the_baseline_loop], ids=["default", "baseline"])
def test_escapes_and_brackets_across_block_boundaries(loop: Any) -> None:
    """Backslash runs, escaped quotes and brackets in strings, at every offset of a 64-byte block."""
    for shift in range(140):
        payload = (
            b'{"a":"' + b"x" * shift + b'\\\\\\"]}[{\\\\","b":[{"c":"\\u005d"}],"d":"' + b"\\" * 70 + b'"}'
        )
        line = (
            b'{"ng_trajectory":{"model_calls":[{"request":' + payload + b',"response":[' + payload + b"]}]}}"
        )
        assert orjson.loads(line)  # valid JSON
        assert loop(line) == (
            b'{"ng_trajectory":{"model_calls":[{"request":0,"response":0}]}}',
            [payload],
            [b"[" + payload + b"]"],
        ), shift


@needs_native
@pytest.mark.parametrize(
    "line",
    [
        b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","model_calls":[{"requ\\u0065st":1}]}}',
        b'{"ng_traj\\u0065ctory":{"task_id":"t","rollout_id":"r","model_calls":[{"request":1}]}}',
        b'{"ng_trajectory":{"model_c\\u0061lls":[{"request":1}],"task_id":"t","rollout_id":"r"}}',
        b'{"x\\"y":1,"ng_trajectory":null}',
        b'{"response":{"us\\u0061ge":{"a":1},"id":"r"}}',
    ],
)
def test_an_escaped_key_on_the_path_decodes_the_line_itself(line: bytes) -> None:
    assert compact(line) is None
    assert_same_decode(line)


@needs_native
@pytest.mark.parametrize(
    "line", [b"", b"[1]", b'"s"', b"{}", b'{"ng_trajectory":null}', b'{"_ng_task_index":1}']
)
def test_nothing_to_cut_decodes_the_line_itself(line: bytes) -> None:
    assert compact(line) is None
    assert vet_compact(line) is (False if line == b"" else None)


@needs_native
def test_unvetted_bytes_never_read_past_the_line() -> None:
    """Truncated or malformed input gives None or some copy, never a crash."""
    line = orjson.dumps(base_record())
    for end in range(0, len(line), 7):
        compact(line[:end])
    for garbage in (
        b'{"a":"\\',
        b'{"a":[[[',
        b'{"a"',
        b'{"a":',
        b'{"ng_trajectory":{"model_calls":[{"request":"',
    ):
        compact(garbage)
        assert vet_compact(garbage) is False
    for end in range(0, len(line) - 1, 7):
        assert vet_compact(line[:end]) is False


@needs_native
def test_no_reference_leaks() -> None:
    line = orjson.dumps(corpus_rows()[0])
    before = sys.getrefcount(line)
    for _ in range(200):
        found = compact(line)
        assert found is not None
        del found
        fused = vet_compact(line, _VETTED_DEPTH)
        assert fused
        del fused
        lean = vet_lean(line, _VETTED_DEPTH)
        assert lean
        del lean
    assert sys.getrefcount(line) == before


def test_without_the_extension_the_line_is_decoded_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload_spans, "_compact", None)
    monkeypatch.setattr(payload_spans, "_vet_compact", None)
    for row in corpus_rows()[:20]:
        line = orjson.dumps(row)
        assert decode_strict_skipping_payloads(line) == decode_strict(line)
        assert decode_strict_if_vetted(line, _VETTED_DEPTH) == decode_strict(line)
        assert decode_strict_if_vetted(line[:-1], _VETTED_DEPTH) is NOT_JSON


# --------------------------------------------------------------------------------------------
# Generated lines around the cut places

_PAYLOAD_STRINGS = st.sampled_from(['"', "\\", '\\"', '"}]', "{[", "\\\\", "\u2028", "é", "\x00", "x" * 70])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.lists(_PAYLOAD_STRINGS, max_size=4).map("".join),
)
_PAYLOADS = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_RAW_PAYLOADS = st.one_of(
    _PAYLOADS,
    st.sampled_from(
        [
            RawJSON(b'"\\u0022\\\\\\"}]"'),
            RawJSON(b' [ 1 , { "a" : [ ] } ] '),
            RawJSON(b"-0.0e-7"),
            RawJSON(b"[" * 253 + b"]" * 253),
            RawJSON(b"[" * 254 + b"]" * 254),
            RawJSON(b'{"k":' * 253 + b"1" + b"}" * 253),
            RawJSON(b'"' + b"\\\\" * 40 + b'"'),
        ]
    ),
)
_CALL_KEYS = st.sampled_from(
    ["request", "response"] * 12 + ["model_call_id", "model_call_id", "requests", "Response"]
)


@st.composite
def _call(draw: st.DrawFn) -> Any:
    pairs = [(draw(_CALL_KEYS), draw(_RAW_PAYLOADS)) for _ in range(draw(st.integers(0, 5)))]
    pairs = [
        (k, v if k not in ("model_call_id",) else draw(st.one_of(st.none(), st.text(max_size=4))))
        for k, v in pairs
    ]
    return DupObject(tuple(pairs))


@st.composite
def _trajectory(draw: st.DrawFn, calls: list[Any]) -> Any:
    pairs: list[tuple[str, Any]] = [("task_id", "t"), ("rollout_id", "r")]
    for _ in range(draw(st.integers(1, 2))):
        model_calls = draw(
            st.sampled_from([*[calls] * 10, draw(st.lists(_call(), max_size=3)), None, 3, {}, [1], [[]]])
        )
        pairs.insert(draw(st.integers(0, len(pairs))), ("model_calls", model_calls))
    return DupObject(tuple(pairs))


@st.composite
def _top_level_response(draw: st.DrawFn) -> Any:
    """null, or an object of which the strict decode reads ``usage`` (repeated or not) alone."""
    if draw(st.booleans()):
        return None
    keys = draw(st.lists(st.sampled_from(["usage", "usage", "id", "output", "Usage"]), max_size=4))
    return DupObject(tuple((key, draw(_RAW_PAYLOADS)) for key in keys))


@st.composite
def generated_line(draw: st.DrawFn) -> bytes:
    calls = draw(st.lists(_call(), min_size=draw(st.sampled_from([0, 1, 1])), max_size=4))
    pairs: list[tuple[str, Any]] = [("_ng_task_index", 0), ("_ng_rollout_index", 1)]
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2]))):
        kind = draw(st.sampled_from(["trajectory"] * 6 + ["null", "other"]))
        trajectory = (
            _trajectory(calls) if kind == "trajectory" else st.none() if kind == "null" else _RAW_PAYLOADS
        )
        pairs.append(("ng_trajectory", draw(trajectory)))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(
            st.sampled_from(["extra", "response", "stage_index", "_ng_rollout_id", "ng_trajectory_", ""])
        )
        options = (
            st.sampled_from([None, {"usage": {"a": 1}, "x": "}"}]) if key == "response" else _RAW_PAYLOADS
        )
        value = draw(options)
        pairs.insert(draw(st.integers(0, len(pairs))), (key, value))
    line = encode(DupObject(tuple(pairs)))
    if draw(st.booleans()):  # whitespace around every structural byte
        line = line.replace(b'":', b'" :\t').replace(b",", b" ,\n ")
    return line


@needs_native
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=generated_line())
def test_generated_lines(line: bytes) -> None:
    vetted = assert_same_decode(line)
    event("vetted" if vetted else "not vetted")
    if vetted:
        event("cut" if compact(line) is not None else "decoded itself")
        record = decode_strict(line)
        event(
            "no record"
            if record is None
            else "calls"
            if record.ng_trajectory and record.ng_trajectory.model_calls
            else "record"
        )


def _synthetic_with_payloads(chooser: Any) -> bytes:
    """A synthetic row with one call's payloads swapped for awkward ones."""
    row = copy.deepcopy(pick(chooser, [*corpus_rows(), base_record()]))
    trajectory = row.get("ng_trajectory") or {}
    calls = trajectory.get("model_calls") or []
    if calls:
        call = calls[chooser.index(len(calls))]
        call["request"] = pick(chooser, ['"\\"', {"a": ['"]}']}, None, [], 0])
        if chooser.chance(0.5):
            del call["response"]
    return orjson.dumps(row)


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_synthetic_rows(data: st.DataObject) -> None:
    chooser = DrawChooser(data)
    line = (
        _synthetic_with_payloads(chooser)
        if chooser.chance(0.3)
        else mutated_line(chooser, pick(chooser, [*corpus_rows(), base_record()]), 1 + chooser.index(3))
    )
    assert_same_decode(line)


@needs_native
def test_every_synthetic_row_is_cut_and_decodes_the_same() -> None:
    for seed, row in enumerate(corpus_rows()):
        line = orjson.dumps(row)
        found = compact(line)
        assert found is not None and len(found[0]) < len(line)
        assert assert_same_decode(line)
        assert assert_same_decode(mutated_line(SeededChooser(seed), row, 2)) in (True, False)


# --------------------------------------------------------------------------------------------
# The conversations' free texts, left out of the vetter's copy


@needs_native
def test_the_vetters_copy_leaves_out_the_conversations_texts_when_asked() -> None:
    line = (
        b'{"text":"top","ng_trajectory":{"task_id":"t","rollout_id":"r",'
        b'"turns":[{"answer":"kept","text":"kept"}],"invocations":[{"invocation_id":"i","conversation":['
        b'{"type":"message","role":"user","content":"hi \\"there\\""},'
        b'{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a\\u00e9"}]},'
        b'{"type":"function_call","arguments":"{}","name":"f","call_id":"c","te\\u0078t":"escaped"},'
        b'{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":null,"output":7}'
        b'],"conversation":[{"output":["x",{"text":"deep"}]}]}]}}'
    )
    elided = vet_lean(line, _VETTED_DEPTH)
    assert elided and elided[1] == b""  # no calls
    assert elided[0] == (
        b'{"text":0,"ng_trajectory":{"task_id":"t","rollout_id":"r",'
        b'"turns":[{"answer":"kept","text":"kept"}],"invocations":[{"invocation_id":"i","conversation":['
        b'{"type":"message","role":"user","content":""},'
        b'{"type":"message","role":"assistant","content":[{"type":"output_text","text":""}]},'
        b'{"type":"function_call","arguments":"","name":"f","call_id":"c","te\\u0078t":"escaped"},'
        b'{"type":"reasoning","summary":[{"type":"summary_text","text":""}],"content":null,"output":7}'
        b'],"conversation":[{"output":["x",{"text":""}]}]}]}}'
    )
    kept, vetted = compact(line), vet_compact(line, _VETTED_DEPTH)
    assert kept and vetted and vetted[0] == kept[0] and b"a\\u00e9" in kept[0]
    assert_same_decode(line)


@needs_native
def test_the_lean_copy_leaves_out_questions_and_tool_outputs() -> None:
    line = (
        b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","turns":[{"question":{"q":[1]},"answer":"a",'
        b'"qu\\u0065stion":"kept"},7],"tool_calls":[{"output":"o","tool_call_id":"c"}],"output":"kept"}}'
    )
    lean = vet_lean(line, _VETTED_DEPTH)
    assert lean and lean[0] == (
        b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","turns":[{"question":0,"answer":"a",'
        b'"qu\\u0065stion":"kept"},7],"tool_calls":[{"output":0,"tool_call_id":"c"}],"output":"kept"}}'
    )
    assert vet_compact(line, _VETTED_DEPTH) is None  # nothing the full copy cuts
    assert_same_decode(line)


@needs_native
def test_the_lean_copy_hands_back_where_each_response_is() -> None:
    line = (
        b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","model_calls":[{"request":{"a":1},"response":[2]},'
        b'{"response":null},{},{"response":{"x":1},"response":null},{"response":null,"response":"s"}]}}'
    )
    lean = vet_lean(line, _VETTED_DEPTH)
    assert lean
    copy_, responses = lean
    assert copy_ == (
        b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","model_calls":[{"request":0,"response":0},'
        b'{"response":null},{},{"response":0,"response":null},{"response":null,"response":0}]}}'
    )
    spans = [response_span(responses, index) for index in range(5)]
    assert [line[start:end] if start >= 0 else None for start, end in spans] == [
        b"[2]",
        None,
        None,
        None,
        b'"s"',
    ]
    assert_same_decode(line)


@needs_native
def test_the_fast_path_leaves_out_the_texts_when_the_build_allows() -> None:
    """Every typed field the copy blanks accepts any text alike; a field whose answer depends on
    its text (a literal such as ``role`` or ``type``) would turn the elision off."""
    from health.strict_conversation import text_fields_free

    assert payload_spans.LEAN
    assert text_fields_free(TEXT_KEYS)
    for literal_field in ("role", "type", "status", "phase"):
        assert not text_fields_free([*TEXT_KEYS, literal_field])


_ITEM_TYPES = st.sampled_from(
    ["message", "message", "function_call", "function_call_output", "reasoning", "output_text", "x", 1]
)
_TEXT_STRINGS = st.one_of(st.lists(_PAYLOAD_STRINGS, max_size=3).map("".join), st.text(max_size=8))
_TEXT_VALUES = st.one_of(_TEXT_STRINGS, _TEXT_STRINGS, _PAYLOADS)


@st.composite
def _everyday_item(draw: st.DrawFn) -> Any:
    """A typed everyday item with generated texts (escapes, quotes, brackets, any code point)."""
    text = _TEXT_STRINGS
    return draw(
        st.sampled_from(
            [
                {"type": "message", "role": "user", "content": draw(text)},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": draw(text)}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "m",
                    "content": [{"type": "output_text", "text": draw(text), "annotations": []}],
                },
                {"type": "function_call", "arguments": draw(text), "call_id": draw(text), "name": "f"},
                {"type": "function_call_output", "call_id": "c", "output": draw(text)},
                {
                    "type": "reasoning",
                    "id": "r",
                    "summary": [{"type": "summary_text", "text": draw(text)}],
                    "encrypted_content": draw(st.one_of(st.none(), text)),
                },
            ]
        )
    )


_CONVERSATION_KEYS = (
    *("type", "role", "content", "text", "arguments", "output", "refusal", "encrypted_content"),
    *("call_id", "name", "id", "status", "summary", "annotations"),
)


@st.composite
def _conversation_object(draw: st.DrawFn, depth: int) -> Any:
    """A conversation item or content part: typed-looking keys, text keys holding strings or
    anything else, nested parts."""
    keys = draw(
        st.lists(
            st.sampled_from(_CONVERSATION_KEYS),
            max_size=6,
        )
    )
    pairs: list[tuple[str, Any]] = []
    for key in keys:
        if key == "type":
            value: Any = draw(_ITEM_TYPES)
        elif key == "role":
            value = draw(st.sampled_from(["user", "assistant", "x"]))
        elif key in ("content", "summary", "output") and depth < 2 and draw(st.booleans()):
            value = draw(st.lists(_conversation_object(depth + 1), max_size=3))
        elif key == "annotations":
            value = draw(st.sampled_from([[], ["x"]]))
        else:
            value = draw(_TEXT_VALUES)
        pairs.append((key, value))
    return DupObject(tuple(pairs))


@st.composite
def conversation_line(draw: st.DrawFn) -> bytes:
    """A record whose invocations hold generated conversations, among typed everyday items."""
    everyday = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "function_call", "arguments": '{"a":1}', "call_id": "c", "name": "f"},
        {"type": "function_call_output", "call_id": "c", "output": "o"},
    ]
    invocations = []
    for number in range(draw(st.integers(1, 2))):
        items = [
            *everyday[: draw(st.integers(0, 3))],
            *draw(st.lists(_everyday_item(), max_size=4)),
            *draw(st.lists(_conversation_object(0), max_size=draw(st.sampled_from([0, 0, 2])))),
        ]
        pairs: list[tuple[str, Any]] = [("invocation_id", f"i{number}"), ("conversation", items)]
        if draw(st.booleans()):
            pairs.append(("conversation", draw(st.sampled_from([[], everyday, "x", None]))))
        invocations.append(DupObject(tuple(pairs)))
    trajectory = DupObject((("task_id", "t"), ("rollout_id", "r"), ("invocations", invocations)))
    line = encode(DupObject((("_ng_task_index", 0), ("ng_trajectory", trajectory))))
    if draw(st.booleans()):  # an escaped key may spell a text key: its value is kept
        line = line.replace(b'"text":', b'"te\\u0078t":', 1).replace(b'"content":', b'"c\\u006fntent":', 1)
    return line


@needs_native
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=conversation_line())
def test_generated_conversations(line: bytes) -> None:
    if not assert_same_decode(line):
        event("not vetted")  # nested deeper than the fast path vets
        return
    record = decode_strict(line)
    event("no record" if record is None else "typed" if record.typed_conversations else "plain")


@needs_native
def test_a_rejected_line_is_read_from_the_lean_copy_alike() -> None:
    """A line whose trajectory a witness refuses, with conversations of every everyday kind: the
    lean copy is refused where the full one is, and the rejection reads both alike."""
    leaner = 0
    for row in corpus_rows()[:40]:
        rejected = copy.deepcopy(row)
        calls = (rejected.get("ng_trajectory") or {}).get("model_calls") or []
        if not calls:
            continue
        calls[-1]["duration_ms"] = -1.0  # a witness: the contract refuses a negative duration
        line = orjson.dumps(rejected)
        lean = decode_strict_lean(line, _VETTED_DEPTH)
        assert (lean.record, lean.responses) == (None, None)
        full_copy = decode_strict_if_vetted_from_copy(line, _VETTED_DEPTH)[1]
        leaner += len(lean.decoded) < len(full_copy)  # the lean copy was read
        found = read_rejected_record(lean.decoded)
        assert found is not None and found == read_rejected_record(full_copy)
        assert_same_decode(line)
    assert leaner > 10
