"""The batch fast path (``health.fast_path``) against the full path, line by line.

The invariant: for every input line, ``digest_line`` returns exactly the digest of the full path
(orjson + the pydantic contract, ``_digest_parsed``); the fast path either defers or agrees, and
never vouches for a line orjson rejects. Every test here builds lines and checks that invariant
with :func:`assert_paths_agree` (which also compares ``repr``, so ``2`` vs ``2.0`` or ``0.0`` vs
``-0.0`` in a report would show). Some also pin whether the fast path vouched, so that it cannot
rot into always deferring, or accept what it must not.

Lines come from a template record with splice points (``fast_path_support.TEMPLATE``: raw bytes
in a value, or raw ``"key":value`` pairs before/after an object's keys, which is how duplicate
keys and invalid JSON get in), from path edits of that record, from ``sidecar.demo.synthetic`` runs
(faults included) and their random mutations, and from the conformance vectors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import health.digest
from health.fast_path import read_stripped_line
from health.registry import ROLLOUT_CHECK_IDS
from health.rejection import RejectedRecord
from health.types import RolloutDigest
from tests.health.fast_path_support import (
    DELETE,
    POLICY,
    TEMPLATE,
    VALUE_DEFAULTS,
    Chooser,
    DrawChooser,
    KeyPath,
    RawJSON,
    SeededChooser,
    assert_paths_agree,
    assert_same_digest,
    base_record,
    corpus_rows,
    deep_json,
    digest_line_at,
    encode,
    fast_path_digest,
    full_path_digest,
    mutated_line,
    orjson_reads_an_object,
    pick,
    synthetic_corpus,
    with_changes,
)
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

# Paths into the template record.
TRAJECTORY: KeyPath = ("ng_trajectory",)
INVOCATION: KeyPath = (*TRAJECTORY, "invocations", 0)
TURN: KeyPath = (*TRAJECTORY, "turns", 0)
TURN_REF: KeyPath = (*TURN, "model_calls", 0)
INVOCATION_REF: KeyPath = (*INVOCATION, "model_calls", 0)
CALL: KeyPath = (*TRAJECTORY, "model_calls", 0)
LENGTH_CALL: KeyPath = (*TRAJECTORY, "model_calls", 1)
METADATA: KeyPath = (*CALL, "response_metadata")
MODEL_REF: KeyPath = (*METADATA, "model_ref")
TOKENS: KeyPath = (*CALL, "token_stats")
TOOL: KeyPath = (*TRAJECTORY, "tool_calls", 0)
GAP: KeyPath = (*TRAJECTORY, "gaps", 0)


def _line(*changes: tuple[KeyPath, Any]) -> bytes:
    return orjson.dumps(with_changes(base_record(), *changes))


def _unreadable_errors(digest: RolloutDigest) -> list[Any]:
    return [f.detail.get("error") for f in digest.findings if f.check == "record_unreadable"]


def test_the_template_is_healthy_and_takes_the_fast_path() -> None:
    """Every edit below starts from a record the fast path vouches for and the checks pass."""
    line = TEMPLATE.render()
    assert orjson.loads(line) == base_record()
    digest = full_path_digest(line)
    assert (digest.verdict, digest.findings, digest.unobserved) == ("healthy", [], [])
    assert (digest.model_calls, digest.successful_model_calls) == (2, 2)
    assert assert_paths_agree(line)


# --------------------------------------------------------------------------------------------
# 1. JSON acceptance: edge-case documents spliced into a valid record

VALUE_EDGES: list[tuple[str, bytes, bool]] = [
    # (id, raw JSON text, plainly valid: the fast path must vouch when it sits in a skipped key)
    # UTF-8
    ("utf8_ff", b'"\xff"', False),
    ("utf8_truncated_2byte", b'"\xc3"', False),
    ("utf8_lone_continuation", b'"\x80"', False),
    ("utf8_5byte", b'"\xf8\x88\x80\x80\x80"', False),
    ("overlong_slash_2byte", b'"\xc0\xaf"', False),
    ("overlong_slash_3byte", b'"\xe0\x80\xaf"', False),
    ("overlong_slash_4byte", b'"\xf0\x80\x80\xaf"', False),
    ("overlong_nul", b'"\xc0\x80"', False),
    ("surrogate_bytes_high", b'"\xed\xa0\x80"', False),
    ("surrogate_bytes_low", b'"\xed\xbf\xbf"', False),
    ("surrogate_bytes_cesu_pair", b'"\xed\xa0\xbd\xed\xb8\x80"', False),
    ("beyond_u10ffff", b'"\xf4\x90\x80\x80"', False),
    ("invalid_utf8_outside_string", b"\xff", False),
    ("max_code_point", b'"\xf4\x8f\xbf\xbf"', True),
    ("emoji", b'"\xf0\x9f\x98\x80"', True),
    ("noncharacter_fffe", b'"\xef\xbf\xbe"', True),
    ("bom_inside_string", b'"\xef\xbb\xbf"', True),
    # escapes
    ("lone_high_surrogate", b'"\\ud800"', False),
    ("lone_low_surrogate", b'"\\udc00"', False),
    ("reversed_surrogates", b'"\\udc00\\ud800"', False),
    ("high_surrogate_then_text", b'"\\ud800x"', False),
    ("two_high_surrogates", b'"\\ud800\\ud800"', False),
    ("high_surrogate_then_bmp_escape", b'"\\ud800\\u0041"', False),
    ("surrogate_pair", b'"\\ud83d\\ude00"', True),
    ("surrogate_pair_upper_hex", b'"\\uD83D\\uDE00"', True),
    ("escaped_nul", b'"a\\u0000b"', True),
    ("simple_escapes", b'"\\"\\\\\\/\\b\\f\\n\\r\\t"', True),
    ("invalid_escape_x", b'"\\x41"', False),
    ("short_unicode_escape", b'"\\u12"', False),
    ("upper_u_escape", b'"\\U0041"', False),
    ("unterminated_string", b'"\\"', False),
    # control characters
    ("raw_nul_in_string", b'"a\x00b"', False),
    ("raw_01_in_string", b'"\x01"', False),
    ("raw_1f_in_string", b'"\x1f"', False),
    ("raw_tab_in_string", b'"a\tb"', False),
    ("raw_newline_in_string", b'"a\nb"', False),
    ("raw_del_in_string", b'"\x7f"', True),
    # numbers
    ("nan", b"NaN", False),
    ("nan_lower", b"nan", False),
    ("infinity", b"Infinity", False),
    ("minus_infinity", b"-Infinity", False),
    ("overflow_1e400", b"1e400", False),
    ("overflow_minus_1e400", b"-1e400", False),
    ("overflow_1_8e308", b"1.8e308", False),
    ("overflow_minus_1_8e308", b"-1.8e308", False),
    ("max_double", b"1.7976931348623157e308", True),
    ("underflow_1e_400", b"1e-400", True),
    ("min_subnormal", b"4.9e-324", True),
    ("below_half_min_subnormal", b"2.4e-324", True),
    ("digits_400", b"1" * 400, False),
    ("digits_400_negative", b"-" + b"1" * 400, False),
    ("fraction_digits_400", b"0." + b"1" * 400, True),
    ("u64_max", str(2**64 - 1).encode(), True),
    ("u64_max_plus_1", str(2**64).encode(), False),
    ("i64_min", str(-(2**63)).encode(), True),
    ("i64_min_minus_1", str(-(2**63) - 1).encode(), False),
    ("i64_max_plus_1", str(2**63).encode(), True),
    ("minus_u64_max", str(-(2**64) + 1).encode(), False),
    ("int_beyond_2_53", b"9007199254740993", True),
    ("minus_zero_int", b"-0", True),
    ("minus_zero_float", b"-0.0", True),
    ("zero_exponent", b"0e0", True),
    ("upper_exponent_plus", b"1E+2", True),
    ("leading_zero", b"01", False),
    ("minus_leading_zero", b"-01", False),
    ("trailing_dot", b"1.", False),
    ("leading_dot", b".5", False),
    ("plus_sign", b"+1", False),
    ("hex", b"0x10", False),
    ("dangling_exponent", b"1e", False),
    ("dangling_exponent_sign", b"1e+", False),
    ("lone_minus", b"-", False),
    ("double_minus", b"--1", False),
    ("underscore_digits", b"1_000", False),
    # literals
    ("true", b"true", True),
    ("null", b"null", True),
    ("truncated_true", b"tru", False),
    ("python_true", b"True", False),
    ("upper_null", b"NULL", False),
    # structure
    ("empty_array", b"[]", True),
    ("empty_object", b"{}", True),
    ("array_trailing_comma", b"[1,]", False),
    ("object_trailing_comma", b'{"a":1,}', False),
    ("array_missing_comma", b"[1 2]", False),
    ("object_missing_colon", b'{"a" 1}', False),
    ("object_number_key", b"{1:2}", False),
    ("unclosed_array", b'["a"', False),
    ("extra_closer", b'["a"]]', False),
    ("duplicate_keys_inside", b'{"k":1,"k":2}', True),
    ("duplicate_keys_first_invalid", b'{"k":NaN,"k":2}', False),
    ("duplicate_keys_first_bad_utf8", b'{"k":"\xff","k":2}', False),
    ("duplicate_keys_last_bad_escape", b'{"k":1,"k":"\\ud800"}', False),
    # whitespace around the value
    ("json_whitespace", b" \t\r\n 7 \r\n\t ", True),
    ("vertical_tab", b"\x0b7", False),
    ("form_feed", b"\x0c7", False),
    ("trailing_form_feed", b"7\x0c", False),
    ("nbsp", b"\xc2\xa07", False),
    ("ideographic_space", b"\xe3\x80\x807", False),
    ("trailing_nul", b"7\x00", False),
]


def _raw(raw: bytes) -> bytes:
    return raw


EMBEDDINGS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    # name: (template value slot, how the edge value is wrapped there)
    "skipped_key": ("skipped", _raw),
    "skipped_key_nested": ("skipped", lambda raw: b'{"a":[1,{"b":' + raw + b"}]}"),
    "conversation_text": ("text", _raw),
    "question": ("question", _raw),
    "answer": ("answer", lambda raw: b'[{"type":"message","content":' + raw + b"}]"),
    "reasoning_content": ("reasoning", _raw),
    "tool_output": ("tool_output", _raw),
    "gap_detail": ("gap_detail", _raw),
    "request": ("request", lambda raw: b'{"input":' + raw + b"}"),
    "request_bare": ("request", _raw),
    "response_stop_call": ("response", lambda raw: b'{"output":' + raw + b',"output_text":"ok"}'),
    "response_bare": ("response", _raw),
    "response_length_call": ("length_response", lambda raw: b'{"output_text":"ok","extra":' + raw + b"}"),
    "response_length_call_bare": ("length_response", _raw),
}
"""Where each edge value goes: skipped keys, free-form values, typed strings, raw payloads."""

HEAD_EMBEDDINGS: dict[str, tuple[str, bytes]] = {
    # name: (object slot, key of a raw pair put before its first key)
    "top_level_unknown_key": ("top", b'"zz"'),
    "model_ref_extra_key": ("model_ref", b'"zz"'),  # the contract drops unknown keys here
    "turn_unknown_key": ("turn", b'"zz"'),  # the contract forbids unknown keys here
}


@pytest.mark.parametrize(("raw", "plain"), [pytest.param(r, p, id=i) for i, r, p in VALUE_EDGES])
def test_edge_json_values_everywhere(raw: bytes, plain: bool) -> None:
    """Each edge value, in a skipped key, a free-form value, a typed string and the raw payloads."""
    for name, (slot, wrap) in EMBEDDINGS.items():
        line = TEMPLATE.render(values={slot: wrap(raw)})
        vouched = assert_paths_agree(line)
        if not orjson_reads_an_object(line):
            assert not vouched, name
    for name, (slot, key) in HEAD_EMBEDDINGS.items():
        line = TEMPLATE.render(head={slot: key + b":" + raw})
        vouched = assert_paths_agree(line)
        if name == "turn_unknown_key":
            assert not vouched
    if plain:  # plainly valid JSON, no 64-bit-plus integer: a skipped key must not make it defer
        assert assert_paths_agree(TEMPLATE.render(values={"skipped": raw}))
        assert assert_paths_agree(TEMPLATE.render(head={"model_ref": b'"zz":' + raw}))
    else:  # the table is right: not JSON to orjson, or an integer orjson reads as a float
        assert not orjson_reads_an_object(TEMPLATE.render(values={"skipped": raw})) or raw in BEYOND_64_BITS


BEYOND_64_BITS = (b"18446744073709551616", b"-9223372036854775809", b"-18446744073709551615", b"9" * 30)


def test_integers_beyond_64_bits_defer_where_orjson_reads_floats() -> None:
    """orjson turns them into floats, msgspec would keep exact ints: the fast path must defer."""
    for raw in BEYOND_64_BITS:
        for line in (
            TEMPLATE.render(values={"skipped": raw}),
            TEMPLATE.render(values={"question": raw}),
            _line((("_ng_rollout_id",), 0)).replace(b'"_ng_rollout_id":0', b'"_ng_rollout_id":' + raw),
            TEMPLATE.render().replace(b'"input_tokens":30', b'"input_tokens":' + raw),
        ):
            assert orjson_reads_an_object(line)
            assert not assert_paths_agree(line)


@pytest.mark.parametrize("levels", range(1018, 1028))
def test_nesting_near_orjsons_limit(levels: int) -> None:
    """orjson refuses documents nested past 1024 levels; the fast path must not read them."""
    for kind in ("array", "object"):
        value = deep_json(levels - 1, kind)  # the record itself is one more level
        for line in (
            b'{"a":' + value + b"}",
            TEMPLATE.render(values={"skipped": value}),
            TEMPLATE.render(values={"request": value}),
            TEMPLATE.render(values={"tool_output": value}),
        ):
            vouched = assert_paths_agree(line)
            if levels > 1024:
                assert not vouched


LINE_EDGES: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("as_is", lambda line: line),
    ("bom", lambda line: b"\xef\xbb\xbf" + line),
    ("space_then_bom", lambda line: b" \xef\xbb\xbf" + line),
    ("utf16_bom", lambda line: b"\xff\xfe" + line),
    ("leading_spaces", lambda line: b"  \t" + line),
    ("trailing_crlf", lambda line: line + b"\r\n"),
    ("leading_vertical_tab", lambda line: b"\x0b" + line),
    ("trailing_vertical_tab", lambda line: line + b"\x0b"),
    ("leading_form_feed", lambda line: b"\x0c" + line),
    ("trailing_form_feed", lambda line: line + b"\x0c \n"),
    ("trailing_file_separator", lambda line: line + b"\x1c"),
    ("leading_nul", lambda line: b"\x00" + line),
    ("trailing_nul", lambda line: line + b"\x00"),
    ("trailing_nbsp", lambda line: line + b"\xc2\xa0"),
    ("trailing_garbage", lambda line: line + b"x"),
    ("trailing_closer", lambda line: line + b"}"),
    ("trailing_comma", lambda line: line + b","),
    ("trailing_comment", lambda line: line + b" // note"),
    ("two_records", lambda line: line + line),
    ("two_records_spaced", lambda line: line + b" " + line),
    ("two_lines", lambda line: line + b"\n{}"),
    ("truncated_by_one", lambda line: line[:-1]),
    ("truncated_half", lambda line: line[: len(line) // 2]),
    ("wrapped_in_array", lambda line: b"[" + line + b"]"),
    # balanced once the fast path wraps the line in arrays for its depth bound
    ("closes_the_wrapping", lambda line: line + b"],[" + line),
    ("closes_the_wrapping_empty", lambda line: line + b"],["),
    ("closes_the_wrapping_value", lambda line: line + b"],1,["),
    ("whitespace_between_tokens", lambda line: line.replace(b'":', b'" :\r\n ').replace(b",", b" ,\t")),
    ("vertical_tab_between_tokens", lambda line: line.replace(b'","', b'",\x0b"', 1)),
    ("form_feed_between_tokens", lambda line: line.replace(b'":', b'":\x0c', 1)),
    ("escaped_trajectory_key", lambda line: line.replace(b'"ng_trajectory"', b'"ng_\\u0074rajectory"')),
    ("escaped_turn_no_key", lambda line: line.replace(b'"turn_no"', b'"turn\\u005fno"')),
    ("escaped_model_call_id", lambda line: line.replace(b'"c1"', b'"\\u0063\\u0031"')),
    ("escaped_finish_reason", lambda line: line.replace(b'"length"', b'"l\\u0065ngth"')),
    ("escaped_task_index_key", lambda line: line.replace(b'"_ng_task_index"', b'"_ng_task_inde\\u0078"')),
    ("lone_surrogate_in_key", lambda line: line.replace(b'"skipped"', b'"skipped\\ud800"')),
    ("bad_utf8_in_key", lambda line: line.replace(b'"skipped"', b'"skipped\xff"')),
    ("bad_utf8_in_trajectory_key", lambda line: line.replace(b'"gaps"', b'"gaps\xc0\xaf"')),
]

NOT_OBJECTS = [b"[]", b"[{}]", b'"str"', b"1", b"-0.5", b"null", b"true", b"{}", b"{ }", b'{"a":1}']


@pytest.mark.parametrize("transform", [pytest.param(f, id=i) for i, f in LINE_EDGES])
def test_whole_line_variants(transform: Callable[[bytes], bytes]) -> None:
    line = transform(TEMPLATE.render())
    vouched = assert_paths_agree(line)
    if line.startswith((b"\xef\xbb\xbf", b" \xef")):
        assert not vouched


def test_top_level_values_other_than_records() -> None:
    for line in NOT_OBJECTS:
        vouched = assert_paths_agree(line)
        assert vouched == line.startswith(b"{")


DUPLICATE_KEYS: list[tuple[str, str, str, bytes]] = [
    # (id, object slot, "head" (first occurrence, the template's value wins) or "tail" (it loses), pair)
    ("task_index_first_str", "top", "head", b'"_ng_task_index":"x"'),
    ("task_index_last_str", "top", "tail", b'"_ng_task_index":"x"'),
    ("task_index_last_null", "top", "tail", b'"_ng_task_index":null'),
    ("task_index_first_nan", "top", "head", b'"_ng_task_index":NaN'),
    ("task_index_last_float", "top", "tail", b'"_ng_task_index":4.0'),
    ("trajectory_first_null", "top", "head", b'"ng_trajectory":null'),
    ("trajectory_last_null", "top", "tail", b'"ng_trajectory":null'),
    ("trajectory_first_invalid", "top", "head", b'"ng_trajectory":{"task_id":1}'),
    ("trajectory_last_invalid", "top", "tail", b'"ng_trajectory":{"task_id":1}'),
    ("trajectory_last_other", "top", "tail", b'"ng_trajectory":{"task_id":"t","rollout_id":"r"}'),
    ("trajectory_first_bad_utf8", "top", "head", b'"ng_trajectory":"\xff"'),
    ("response_last", "top", "tail", b'"response":{"usage":{"input_tokens":1,"output_tokens":1}}'),
    ("response_first_bad_escape", "top", "head", b'"response":"\\udc00"'),
    ("rollout_id_last_empty", "top", "tail", b'"_ng_rollout_id":""'),
    ("rollout_id_first", "top", "head", b'"_ng_rollout_id":"x"'),
    ("rollout_id_last", "top", "tail", b'"_ng_rollout_id":"x"'),
    ("traj_rollout_id_first_other", "trajectory", "head", b'"rollout_id":"other"'),
    ("traj_rollout_id_last_other", "trajectory", "tail", b'"rollout_id":"other"'),
    ("traj_schema_first_2", "trajectory", "head", b'"schema_version":"2.0"'),
    ("traj_schema_last_2", "trajectory", "tail", b'"schema_version":"2.0"'),
    ("traj_turns_last_empty", "trajectory", "tail", b'"turns":[]'),
    ("traj_calls_first_str", "trajectory", "head", b'"model_calls":"x"'),
    ("traj_calls_last_empty", "trajectory", "tail", b'"model_calls":[]'),
    ("traj_gaps_first_invalid", "trajectory", "head", b'"gaps":[{"code":1}]'),
    ("traj_gaps_last_invalid", "trajectory", "tail", b'"gaps":[{"code":1}]'),
    ("traj_task_id_first_int", "trajectory", "head", b'"task_id":3'),
    ("traj_task_id_last_int", "trajectory", "tail", b'"task_id":3'),
    ("call_id_first_dup", "call", "head", b'"model_call_id":"c2"'),
    ("call_id_last_dup", "call", "tail", b'"model_call_id":"c2"'),
    ("call_response_first_null", "call", "head", b'"response":null'),
    ("call_response_last_null", "call", "tail", b'"response":null'),
    ("call_request_first_nan", "call", "head", b'"request":NaN'),
    ("call_request_last_deep", "call", "tail", b'"request":' + b"[" * 300 + b"]" * 300),
    ("call_started_first_str", "call", "head", b'"started_at":"1"'),
    ("call_started_last_str", "call", "tail", b'"started_at":"1"'),
    ("call_metadata_last_empty", "call", "tail", b'"response_metadata":{}'),
    ("call_tokens_first_null", "call", "head", b'"token_stats":null'),
    ("turn_no_first_str", "turn", "head", b'"turn_no":"x"'),
    ("turn_no_last_str", "turn", "tail", b'"turn_no":"x"'),
    ("turn_no_last_2", "turn", "tail", b'"turn_no":2'),
    ("turn_task_last_other", "turn", "tail", b'"task_id":"other"'),
    ("turn_refs_last_empty", "turn", "tail", b'"model_calls":[]'),
    ("turn_refs_first_invalid", "turn", "head", b'"model_calls":[{}]'),
    ("turn_answer_last_empty", "turn", "tail", b'"answer":""'),
    ("status_last_500", "metadata", "tail", b'"status_code":500'),
    ("status_first_str", "metadata", "head", b'"status_code":"500"'),
    ("status_last_str", "metadata", "tail", b'"status_code":"500"'),
    ("finish_last_length", "metadata", "tail", b'"finish_reason":"length"'),
    ("finish_last_null", "metadata", "tail", b'"finish_reason":null'),
    ("metadata_model_ref_last_null", "metadata", "tail", b'"model_ref":null'),
    ("model_ref_type_first_bad", "model_ref", "head", b'"type":"x"'),
    ("model_ref_type_last_bad", "model_ref", "tail", b'"type":"x"'),
    ("model_ref_name_first_int", "model_ref", "head", b'"name":5'),
    ("model_ref_name_last_judge", "model_ref", "tail", b'"name":"judge"'),
    ("model_ref_extra_nan", "model_ref", "head", b'"zz":NaN'),
    ("model_ref_extra_big_int", "model_ref", "tail", b'"zz":18446744073709551616'),
    ("tokens_first_negative", "tokens", "head", b'"prompt_tokens":-1'),
    ("tokens_last_negative", "tokens", "tail", b'"prompt_tokens":-1'),
    ("tokens_last_null", "tokens", "tail", b'"prompt_tokens":null'),
    ("tokens_last_zero_completion", "tokens", "tail", b'"completion_tokens":0'),
    ("ref_id_last_empty", "ref", "tail", b'"model_call_id":""'),
    ("ref_id_last_null", "ref", "tail", b'"model_call_id":null'),
    ("ref_id_first_other", "ref", "head", b'"model_call_id":"x"'),
    ("invocation_id_first_other", "invocation", "head", b'"invocation_id":"other"'),
    ("invocation_conversation_last_empty", "invocation", "tail", b'"conversation":[]'),
    ("invocation_conversation_first_str", "invocation", "head", b'"conversation":"x"'),
    ("invocation_status_last_bad", "invocation", "tail", b'"status":"bogus"'),
    ("tool_completed_last_early", "tool", "tail", b'"completed_at":1.0'),
    ("tool_started_first_late", "tool", "head", b'"started_at":2'),
    ("tool_started_last_late", "tool", "tail", b'"started_at":2'),
    ("gap_code_last_unavailable", "gap", "tail", b'"code":"turns_unavailable"'),
    ("gap_code_first_int", "gap", "head", b'"code":1'),
    ("gap_detail_last_null", "gap", "tail", b'"detail":null'),
]


@pytest.mark.parametrize(
    ("slot", "where", "pair"), [pytest.param(s, w, p, id=i) for i, s, w, p in DUPLICATE_KEYS]
)
def test_duplicate_keys(slot: str, where: str, pair: bytes) -> None:
    """orjson keeps the last occurrence; the strict decode must read the same one or defer."""
    assert_paths_agree(TEMPLATE.with_pair(slot, where, pair))


def test_duplicate_keys_where_both_are_valid_read_the_last() -> None:
    """Pinned: with two valid values, both paths use the last one (and the fast path vouches)."""
    line = TEMPLATE.render(tail={"metadata": b'"status_code":500'})
    assert assert_paths_agree(line)
    assert full_path_digest(line).errors_by_status == {"500": 1}
    line = TEMPLATE.render(head={"metadata": b'"status_code":500'})
    assert assert_paths_agree(line)
    assert full_path_digest(line).errors_by_status == {}


# --------------------------------------------------------------------------------------------
# 2. Typed fields: lax coercions the contract accepts, bounds, unknown and missing keys

COERCIONS: list[tuple[str, KeyPath, Any]] = [
    ("turn_no_str", (*TURN, "turn_no"), "2"),
    ("turn_no_float", (*TURN, "turn_no"), 2.0),
    ("turn_no_true", (*TURN, "turn_no"), True),
    ("turn_no_zero", (*TURN, "turn_no"), 0),
    ("turn_no_minus_zero", (*TURN, "turn_no"), -0.0),
    ("turn_no_big", (*TURN, "turn_no"), 2**63 - 1),
    ("step_count_str", (*TURN, "step_count"), "0"),
    ("step_count_false", (*TURN, "step_count"), False),
    ("step_count_zero", (*TURN, "step_count"), 0),
    ("step_count_negative", (*TURN, "step_count"), -1),
    ("step_count_zero_float", (*TURN, "step_count"), 0.0),
    ("timestamp_str", (*TURN, "timestamp"), "1.5"),
    ("timestamp_int", (*TURN, "timestamp"), 2),
    ("timestamp_true", (*TURN, "timestamp"), True),
    ("timestamp_null", (*TURN, "timestamp"), None),
    ("timestamp_u64", (*TURN, "timestamp"), 2**64 - 1),
    ("resolved_int", (*TURN, "resolved"), 1),
    ("resolved_zero", (*TURN, "resolved"), 0),
    ("resolved_str", (*TURN, "resolved"), "true"),
    ("resolved_yes", (*TURN, "resolved"), "yes"),
    ("resolved_null", (*TURN, "resolved"), None),
    ("resolved_false", (*TURN, "resolved"), False),
    ("turn_task_id_int", (*TURN, "task_id"), 3),
    ("turn_invocation_id_null", (*TURN, "invocation_id"), None),
    ("status_code_float", (*METADATA, "status_code"), 200.0),
    ("status_code_str", (*METADATA, "status_code"), "200"),
    ("status_code_true", (*METADATA, "status_code"), True),
    ("status_code_500_float", (*METADATA, "status_code"), 500.0),
    ("status_code_u64", (*METADATA, "status_code"), 2**64 - 1),
    ("status_code_negative", (*METADATA, "status_code"), -1),
    ("upstream_status_float", (*METADATA, "upstream_status_code"), 502.0),
    ("upstream_attempted_int", (*METADATA, "upstream_attempted"), 1),
    ("response_source_bad", (*METADATA, "response_source"), "remote"),
    ("response_source_local", (*METADATA, "response_source"), "local"),
    ("finish_reason_int", (*METADATA, "finish_reason"), 1),
    ("error_category_int", (*METADATA, "error_category"), 0),
    ("latency_int", (*METADATA, "latency_ttft_ms"), 5),
    ("latency_minus_zero", (*METADATA, "latency_ttft_ms"), -0.0),
    ("latency_negative", (*METADATA, "latency_ttft_ms"), -0.5),
    ("latency_str", (*METADATA, "latency_ttft_ms"), "5"),
    ("started_at_str", (*CALL, "started_at"), "1.5"),
    ("started_at_int", (*CALL, "started_at"), 1),
    ("started_at_true", (*CALL, "started_at"), True),
    ("started_at_big_int", (*CALL, "started_at"), 9007199254740993),
    ("started_at_null", (*CALL, "started_at"), None),
    ("completed_before_started_call", (*CALL, "completed_at"), 0.5),  # allowed for model calls
    ("call_duration_negative", (*CALL, "duration_ms"), -1),
    ("call_duration_minus_zero", (*CALL, "duration_ms"), -0.0),
    ("call_duration_zero", (*CALL, "duration_ms"), 0),
    ("call_duration_tiny", (*CALL, "duration_ms"), 5e-324),
    ("call_id_int", (*CALL, "model_call_id"), 1),
    ("call_id_empty", (*CALL, "model_call_id"), ""),
    ("prompt_tokens_zero", (*TOKENS, "prompt_tokens"), 0),
    ("prompt_tokens_one", (*TOKENS, "prompt_tokens"), 1),
    ("prompt_tokens_negative", (*TOKENS, "prompt_tokens"), -1),
    ("prompt_tokens_float", (*TOKENS, "prompt_tokens"), 10.0),
    ("prompt_tokens_minus_zero", (*TOKENS, "prompt_tokens"), -0.0),
    ("prompt_tokens_str", (*TOKENS, "prompt_tokens"), "10"),
    ("prompt_tokens_true", (*TOKENS, "prompt_tokens"), True),
    ("completion_tokens_zero", (*TOKENS, "completion_tokens"), 0),
    ("cached_tokens_negative", (*TOKENS, "cached_tokens"), -3),
    ("invocation_duration_negative", (*INVOCATION, "duration_ms"), -1.0),
    ("invocation_duration_minus_zero", (*INVOCATION, "duration_ms"), -0.0),
    ("invocation_duration_int", (*INVOCATION, "duration_ms"), 0),
    ("invocation_kind_wrong", (*INVOCATION, "kind"), "tool_call"),
    ("invocation_kind_right", (*INVOCATION, "kind"), "agent_invocation"),
    ("invocation_kind_null", (*INVOCATION, "kind"), None),
    ("invocation_status_bad", (*INVOCATION, "status"), "done"),
    ("invocation_parent_int", (*INVOCATION, "parent_invocation_id"), 0),
    ("invocation_conversation_null", (*INVOCATION, "conversation"), None),
    ("invocation_conversation_str", (*INVOCATION, "conversation"), "hello"),
    ("invocation_conversation_dict", (*INVOCATION, "conversation"), {"role": "user", "content": "x"}),
    ("invocation_refs_null", (*INVOCATION, "model_calls"), None),
    ("tool_kind_wrong", (*TOOL, "kind"), "agent_invocation"),
    ("tool_status_bad", (*TOOL, "status"), "ok"),
    ("tool_timing_source", (*TOOL, "timing_source"), "executor"),
    ("tool_timing_source_bad", (*TOOL, "timing_source"), "wall"),
    ("tool_duration_negative", (*TOOL, "duration_ms"), -2),
    ("tool_started_str", (*TOOL, "started_at"), "1.2"),
    ("tool_completed_int", (*TOOL, "completed_at"), 2),
    ("gap_code_int", (*GAP, "code"), 5),
    ("gap_code_null", (*GAP, "code"), None),
    ("gap_invocation_int", (*GAP, "invocation_id"), 1),
    ("schema_version_1_1", (*TRAJECTORY, "schema_version"), "1.1"),
    ("schema_version_float", (*TRAJECTORY, "schema_version"), 1.0),
    ("schema_version_null", (*TRAJECTORY, "schema_version"), None),
    ("schema_version_int", (*TRAJECTORY, "schema_version"), 1),
    ("trajectory_task_id_int", (*TRAJECTORY, "task_id"), 3),
    ("trajectory_turns_null", (*TRAJECTORY, "turns"), None),
    ("trajectory_turns_dict", (*TRAJECTORY, "turns"), {}),
    ("trajectory_gaps_null", (*TRAJECTORY, "gaps"), None),
    ("metadata_null", (*CALL, "response_metadata"), None),
    ("metadata_empty", (*CALL, "response_metadata"), {}),
    ("tokens_null", (*CALL, "token_stats"), None),
    ("tokens_list", (*CALL, "token_stats"), []),
    ("model_ref_extra_keys", (*MODEL_REF, "extra"), {"deep": [1, 2]}),
    ("model_ref_extra_key_null", (*MODEL_REF, "version"), None),
    ("model_ref_type_wrong", (*MODEL_REF, "type"), "chat_models"),
    ("model_ref_name_int", (*MODEL_REF, "name"), 1),
    ("model_ref_null", MODEL_REF, None),
    ("model_ref_list", MODEL_REF, [POLICY]),
    ("turn_ref_model_ref_extra", (*TURN_REF, "model_ref"), {**POLICY, "extra": 1}),
    ("trajectory_str", TRAJECTORY, "nope"),
    ("trajectory_list", TRAJECTORY, []),
    ("trajectory_empty", TRAJECTORY, {}),
    ("trajectory_minimal", TRAJECTORY, {"task_id": "3", "rollout_id": "3-1"}),
    ("trajectory_null", TRAJECTORY, None),
]

UNKNOWN_KEY_AT = [TRAJECTORY, INVOCATION, TURN, TURN_REF, INVOCATION_REF, CALL, METADATA, TOKENS, TOOL, GAP]

REQUIRED_KEYS: list[KeyPath] = [
    (*TRAJECTORY, "task_id"),
    (*TRAJECTORY, "rollout_id"),
    (*INVOCATION, "invocation_id"),
    (*TURN, "invocation_id"),
    (*TURN, "task_id"),
    (*TURN, "rollout_id"),
    (*TURN, "turn_no"),
    (*TURN, "timestamp"),
    (*TURN, "step_count"),
    (*TOOL, "invocation_id"),
    (*TOOL, "tool_call_id"),
    (*GAP, "code"),
    (*MODEL_REF, "type"),
    (*MODEL_REF, "name"),
]

OPTIONAL_KEYS: list[KeyPath] = [
    (*TRAJECTORY, "schema_version"),
    (*TRAJECTORY, "invocations"),
    (*TRAJECTORY, "gaps"),
    (*TRAJECTORY, "tool_calls"),
    (*INVOCATION, "status"),
    (*INVOCATION, "conversation"),
    (*INVOCATION, "model_calls"),
    (*TURN, "question"),
    (*TURN, "answer"),
    (*TURN, "model_calls"),
    (*TURN, "resolved"),
    (*CALL, "model_call_id"),
    (*CALL, "request"),
    (*CALL, "response"),
    (*CALL, "response_metadata"),
    (*CALL, "token_stats"),
    (*LENGTH_CALL, "response"),
    (*METADATA, "model_ref"),
    (*METADATA, "status_code"),
    (*TOKENS, "prompt_tokens"),
    (*TOOL, "output"),
    (*TOOL, "started_at"),
    (*GAP, "detail"),
    ("response",),
    ("_ng_task_index",),
    ("_ng_rollout_index",),
]


@pytest.mark.parametrize(("path", "value"), [pytest.param(p, v, id=i) for i, p, v in COERCIONS])
def test_typed_field_values(path: KeyPath, value: Any) -> None:
    assert_paths_agree(_line((path, value)))


def test_lax_coercions_defer_rather_than_coerce() -> None:
    """Pinned: the contract accepts these by coercion; the strict schema must hand them over."""
    for path, value in [
        ((*TURN, "turn_no"), "1"),
        ((*TURN, "turn_no"), 1.0),
        ((*TURN, "turn_no"), True),
        ((*TURN, "step_count"), "2"),
        ((*TURN, "timestamp"), "1.5"),
        ((*TURN, "resolved"), 1),
        ((*METADATA, "status_code"), 200.0),
        ((*METADATA, "status_code"), "200"),
        ((*CALL, "started_at"), "1.0"),
        ((*TOKENS, "prompt_tokens"), 10.0),
    ]:
        line = _line((path, value))
        assert full_path_digest(line).verdict == "healthy", (path, value)  # the contract coerced it
        assert not assert_paths_agree(line), (path, value)


@pytest.mark.parametrize("path", UNKNOWN_KEY_AT, ids=lambda path: "/".join(map(str, path)))
def test_unknown_keys(path: KeyPath) -> None:
    for key, value in [("extra", 1), ("kind", None), ("model_call_id ", "c1"), ("", {})]:
        line = _line(((*path, key), value))
        assert not assert_paths_agree(line)  # the contract forbids unknown keys at these levels


@pytest.mark.parametrize("path", REQUIRED_KEYS + OPTIONAL_KEYS, ids=lambda path: "/".join(map(str, path)))
def test_missing_keys(path: KeyPath) -> None:
    vouched = assert_paths_agree(_line((path, DELETE)))
    if path in REQUIRED_KEYS:
        assert not vouched


# --------------------------------------------------------------------------------------------
# 3. The contract's model-level rules


def _second(path: KeyPath, **changes: Any) -> tuple[KeyPath, Any]:
    """Append a modified copy of the list element at ``path`` to its list."""
    parent, index = path[:-1], path[-1]
    items = list(_get(base_record(), parent))
    items.append({**items[int(index)], **changes})
    return parent, items


def _get(record: Any, path: KeyPath) -> Any:
    for key in path:
        record = record[key]
    return record


MODEL_RULES: list[tuple[str, list[tuple[KeyPath, Any]], bool]] = [
    # (id, changes, valid per the contract)
    ("duplicate_invocation_id", [_second(INVOCATION, conversation=[])], False),
    ("distinct_invocation_ids", [_second(INVOCATION, invocation_id="sub")], True),
    ("duplicate_model_call_id", [((*LENGTH_CALL, "model_call_id"), "c1")], False),
    (
        "duplicate_empty_model_call_ids",
        [((*CALL, "model_call_id"), ""), ((*LENGTH_CALL, "model_call_id"), "")],
        True,
    ),
    (
        "duplicate_null_model_call_ids",
        [((*CALL, "model_call_id"), None), ((*LENGTH_CALL, "model_call_id"), None)],
        True,
    ),
    ("model_call_ids_differ_in_case", [((*LENGTH_CALL, "model_call_id"), "C1")], True),
    ("turn_task_mismatch", [((*TURN, "task_id"), "4")], False),
    ("turn_rollout_mismatch", [((*TURN, "rollout_id"), "3-2")], False),
    ("turn_ids_differ_by_space", [((*TURN, "task_id"), "3 ")], False),
    ("duplicate_turn", [_second(TURN, answer="again")], False),
    ("same_turn_no_other_invocation", [_second(TURN, invocation_id="sub")], True),
    ("next_turn_no", [_second(TURN, turn_no=2)], True),
    ("turn_ref_empty", [((*TURN, "model_calls"), [{}])], False),
    ("turn_ref_empty_id", [((*TURN, "model_calls"), [{"model_call_id": ""}])], False),
    ("turn_ref_model_ref_only", [((*TURN, "model_calls"), [{"model_ref": POLICY}])], False),
    ("turn_ref_response_id_only", [((*TURN, "model_calls"), [{"response_id": "r1"}])], False),
    (
        "turn_ref_empty_response_id",
        [((*TURN, "model_calls"), [{"model_ref": POLICY, "response_id": ""}])],
        False,
    ),
    (
        "turn_ref_null_model_ref",
        [((*TURN, "model_calls"), [{"model_ref": None, "response_id": "r1"}])],
        False,
    ),
    ("turn_ref_pair", [((*TURN, "model_calls"), [{"model_ref": POLICY, "response_id": "r1"}])], True),
    (
        "turn_ref_id_and_bad_pair",
        [((*TURN, "model_calls"), [{"model_call_id": "c1", "response_id": ""}])],
        True,
    ),
    ("invocation_ref_empty", [((*INVOCATION, "model_calls"), [{"model_call_id": None}])], False),
    (
        "invocation_ref_pair",
        [((*INVOCATION, "model_calls"), [{"model_ref": POLICY, "response_id": "r2"}])],
        True,
    ),
    ("tool_completed_before_started", [((*TOOL, "completed_at"), 1.1)], False),
    ("tool_completed_equals_started", [((*TOOL, "completed_at"), 1.2)], True),
    ("tool_completed_minus_zero", [((*TOOL, "started_at"), 0.0), ((*TOOL, "completed_at"), -0.0)], True),
    ("tool_completed_negative", [((*TOOL, "started_at"), 0), ((*TOOL, "completed_at"), -1e-300)], False),
    ("tool_started_null", [((*TOOL, "started_at"), None), ((*TOOL, "completed_at"), 0.0)], True),
    ("tool_completed_null", [((*TOOL, "completed_at"), None)], True),
    ("tool_second_bad", [_second(TOOL, tool_call_id="t2", started_at=5.0, completed_at=4.0)], False),
]


@pytest.mark.parametrize(("changes", "valid"), [pytest.param(c, v, id=i) for i, c, v in MODEL_RULES])
def test_model_level_rules(changes: list[tuple[KeyPath, Any]], valid: bool) -> None:
    line = _line(*changes)
    full = full_path_digest(line)
    assert ("ValidationError" not in _unreadable_errors(full)) == valid  # the case tests what it says
    vouched = assert_paths_agree(line)
    if not valid:
        assert not vouched


# --------------------------------------------------------------------------------------------
# 4. Free-form values nested at the canonical dump's limit

FREE_FORM_SLOTS = ["question", "answer", "reasoning", "tool_output", "request", "response", "length_response"]


@pytest.mark.parametrize("slot", FREE_FORM_SLOTS)
@pytest.mark.parametrize("kind", ["array", "object"])
def test_free_form_depth_at_the_dump_limit(slot: str, kind: str) -> None:
    """The full path reports ``ValueError`` past 254 levels; the fast path vouches well below."""
    for depth in range(250, 258):
        line = TEMPLATE.render(values={slot: deep_json(depth, kind)})
        vouched = assert_paths_agree(line)
        errors = _unreadable_errors(full_path_digest(line))
        assert errors == ([] if depth <= 254 else ["ValueError"]), (slot, kind, depth)
        if depth <= 252:
            assert vouched, (slot, kind, depth)
        empty = deep_json(depth, kind).replace(b"1", b"").replace(b'{"k":}', b"{}")  # innermost empty
        assert_paths_agree(TEMPLATE.render(values={slot: empty}))


def test_free_form_depth_elsewhere_and_brackets_in_strings() -> None:
    """Deep values outside the dump, and brackets that only look like nesting, both agree."""
    deep = deep_json(400)
    lines = [
        TEMPLATE.render(values={"skipped": deep}),
        TEMPLATE.render(head={"model_ref": b'"zz":' + deep}),
        TEMPLATE.render(values={"text": orjson.dumps("[" * 600)}),
        TEMPLATE.render(values={"request": orjson.dumps({"input": "[{" * 300})}),
        TEMPLATE.render(values={"question": orjson.dumps("[" * 600)}),
        TEMPLATE.render(values={"request": deep_json(120, "object").replace(b"1", deep_json(120))}),
        TEMPLATE.render().replace(b'"usage":', b'"deep":' + deep + b',"usage":'),
    ]
    for line in lines:
        assert_paths_agree(line)
        assert _unreadable_errors(full_path_digest(line)) == []


def _with_conversation(*items: Any, alone: bool = False, deep_ref_depth: int = 0) -> bytes:
    """The template with ``items`` appended to (or ``alone`` in) the main invocation's conversation.

    ``deep_ref_depth`` adds an unknown key nested that deep to a ``model_ref`` of the invocation's
    references: the contract drops it, but it makes the full path's cheap depth check on the raw
    invocation fail, so the full path dumps for real while the fast path checks the items only.
    """
    record = base_record()
    invocation = record["ng_trajectory"]["invocations"][0]
    invocation["conversation"] = list(items) if alone else invocation["conversation"] + list(items)
    if deep_ref_depth:
        invocation["model_calls"][0]["model_ref"] = {**POLICY, "zz": RawJSON(deep_json(deep_ref_depth))}
    return encode(record)


def _conversation_items() -> list[Any]:
    """The conversation union's observed cases (``test_conversation``) and a few deep ones."""
    from tests.health.test_conversation import ACCEPTED, RAISES_TYPE_ERROR, REJECTED

    tool_search = {"type": "tool_search_call", "id": "i", "execution": "server", "status": "completed"}
    deep: list[Any] = []
    for depth in range(249, 257):
        deep += [
            {**tool_search, "arguments": RawJSON(deep_json(depth))},
            {"zz": RawJSON(deep_json(depth, "object"))},
            {"role": "user", "content": "hi", "extra": RawJSON(deep_json(depth + 40))},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a", "zz": RawJSON(deep_json(depth))}],
            },
        ]
    return [item for item, _ in ACCEPTED] + list(REJECTED) + list(RAISES_TYPE_ERROR) + deep


_TOKENS = {"prompt_token_ids": [1, 2], "generation_token_ids": [3], "generation_log_probs": [-0.5]}
_TRAINING_BASES: list[dict[str, Any]] = [
    {"role": "user", "content": "x"},
    {"type": "message", "role": "assistant", "content": "x", "phase": None},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
    {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "status": "completed",
        "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}],
    },
    {
        "type": "function_call",
        "call_id": "c",
        "name": "n",
        "arguments": "{}",
        "id": "i",
        "status": "completed",
    },
    {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "s"}], "content": None},
    {"type": "function_call_output", "call_id": "c", "output": "o"},
]
_TOKEN_VARIANTS: list[dict[str, Any]] = [
    {},
    _TOKENS,
    {"prompt_token_ids": [], "generation_token_ids": [], "generation_log_probs": []},
    {**_TOKENS, "generation_log_probs": [-0.5, -1, 0, -0.0, 1e308]},
    {**_TOKENS, "prompt_token_ids": [-1, 2**64 - 1]},
    {**_TOKENS, "generation_token_ids": [True]},
    {**_TOKENS, "generation_token_ids": [3.0]},
    {**_TOKENS, "generation_log_probs": [None]},
    {**_TOKENS, "generation_log_probs": ["-0.5"]},
    {**_TOKENS, "prompt_token_ids": [[1]]},
    {"prompt_token_ids": [1], "generation_token_ids": [2]},
    {**_TOKENS, "routed_experts": None},
    {**_TOKENS, "routed_experts": [[[1]]]},
    {**_TOKENS, "extra": 1},
    {**_TOKENS, "id": "x", "status": "completed"},
]


def test_rl_style_conversation_items() -> None:
    """Everyday shapes with token metadata (training variants) and ``"logprobs": []``, valid or not."""
    vouched = 0
    for base in _TRAINING_BASES:
        for tokens in _TOKEN_VARIANTS:
            item = {**base, **tokens}
            vouched += assert_paths_agree(_with_conversation(item))
            assert_paths_agree(_with_conversation(item, item, alone=True, deep_ref_depth=250))
    assert vouched > 20


def test_conversation_items() -> None:
    """Everyday items, items only the full union accepts, rejected items, and deep ones."""
    vouched = 0
    for item in _conversation_items():
        vouched += assert_paths_agree(_with_conversation(item))
        assert_paths_agree(_with_conversation(item, item))
        assert_paths_agree(_with_conversation(item, alone=True))
        assert_paths_agree(_with_conversation(item, deep_ref_depth=250))
    assert vouched > 40


# --------------------------------------------------------------------------------------------
# 5. Responses of length-limited and other calls

FINISH_REASONS = [
    "length",
    "max_tokens",
    "max_output_tokens",
    "stop",
    None,
    "LENGTH",
    "length ",
    "content_filter",
]
RESPONSES: list[tuple[str, Any]] = [
    ("absent", DELETE),
    ("null", None),
    ("empty_object", {}),
    ("empty_array", []),
    ("empty_string", ""),
    ("string", "text"),
    ("content", {"output_text": "ok"}),
    ("blank_content", {"output_text": "  \n"}),
    ("empty_output", {"output": []}),
    ("output_message", {"output": [{"type": "message", "content": [{"type": "output_text", "text": "x"}]}]}),
    ("chat_choice_text", {"choices": [{"message": {"content": "x"}}]}),
    ("chat_choice_empty", {"choices": [{"message": {"content": ""}}]}),
    ("chat_message_string", {"choices": [{"message": "[truncated]"}]}),  # check_execution_error
    ("chat_choices_int", {"choices": 5}),
    ("false", False),
    ("zero", 0),
]


@pytest.mark.parametrize("finish_reason", FINISH_REASONS)
@pytest.mark.parametrize(("response",), [pytest.param(r, id=i) for i, r in RESPONSES])
def test_responses(finish_reason: str | None, response: Any) -> None:
    line = _line(
        ((*LENGTH_CALL, "response_metadata", "finish_reason"), finish_reason),
        ((*LENGTH_CALL, "response"), response),
    )
    assert assert_paths_agree(line)
    unbound = _line(  # a call no turn or invocation references (a judge)
        _second(LENGTH_CALL, model_call_id="j1", response_metadata={"finish_reason": finish_reason}),
        ((*TRAJECTORY, "model_calls", 2, "response"), response),
    )
    assert_paths_agree(unbound)


def test_length_call_responses_reach_the_runaway_check() -> None:
    """Pinned: the fast path materializes exactly the responses the runaway check reads."""
    for response, fires in [(None, False), ({}, True), ({"output_text": "ok"}, False), ("", True)]:
        line = _line(((*LENGTH_CALL, "response"), response))
        assert assert_paths_agree(line)
        checks = {f.check for f in full_path_digest(line).findings}
        assert ("model_call_runaway_generation" in checks) == fires, response
    line = _line(((*LENGTH_CALL, "response"), {"choices": [{"message": "[cut]"}]}))
    assert assert_paths_agree(line)
    assert "check_execution_error" in {f.check for f in full_path_digest(line).findings}


# --------------------------------------------------------------------------------------------
# 6. Identity

TASK_INDICES: list[Any] = [
    DELETE,
    None,
    0,
    3,
    -1,
    2.0,
    -0.0,
    2.5,
    1e16,
    1e30,
    True,
    False,
    "5",
    "",
    "x",
    [1],
    {"a": 1},
    2**64 - 1,
    -(2**63),
    2**63,
    1e300,
]
STAGE_INDICES: list[Any] = [DELETE, None, 0, 1.0, "s", True, 1.5, [], {}, -1, 2**64 - 1]
ROLLOUT_IDS: list[Any] = [DELETE, None, "", 0, 0.0, False, [], {}, "id", 7, 2.5, True, [0], " "]


def _identity_lines() -> list[bytes]:
    lines = []
    for value in TASK_INDICES:
        lines.append(_line((("_ng_task_index",), value)))
        lines.append(_line((("_ng_rollout_index",), value)))
        lines.append(_line((("_ng_task_index",), value), (TRAJECTORY, None)))
    for value in STAGE_INDICES:
        lines.append(_line((("stage_index",), value)))
    for value in ROLLOUT_IDS:
        lines.append(_line((("_ng_rollout_id",), value)))
        lines.append(_line((("_ng_rollout_id",), value), (TRAJECTORY, DELETE)))
        lines.append(
            _line(
                (("_ng_rollout_id",), value),
                ((*TRAJECTORY, "rollout_id"), ""),
                ((*TURN, "rollout_id"), ""),
                (("_ng_task_index",), 2.0),
            )
        )
    return lines


def test_identity_variants() -> None:
    vouched = [assert_paths_agree(line) for line in _identity_lines()]
    assert 0 < sum(vouched) < len(vouched)


def test_invalid_identity_defers_to_the_full_path() -> None:
    for key in ("_ng_task_index", "_ng_rollout_index", "stage_index"):
        for value in ([1], {"a": 1}, 2.5, 1e30):
            line = _line(((key,), value))
            assert not assert_paths_agree(line)
            assert full_path_digest(line).findings[0].detail["field"] == key
    assert not assert_paths_agree(_line((("_ng_task_index",), None)))


# --------------------------------------------------------------------------------------------
# 7. Random mutations of synthetic rows, and the conformance vectors


def _row_pool() -> list[dict[str, Any]]:
    return [*corpus_rows(), base_record()]


def _mutated(chooser: Chooser) -> bytes:
    return mutated_line(chooser, pick(chooser, _row_pool()), 1 + chooser.index(3))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_synthetic_rows(data: st.DataObject) -> None:
    line = _mutated(DrawChooser(data))
    event("fast path" if assert_paths_agree(line) else "full path")


SWEEP_SIZE = 5000


def test_seeded_mutation_sweep() -> None:
    """A fixed sweep of mutated rows; a fair share must still take the fast path."""
    vouched = sum(assert_paths_agree(_mutated(SeededChooser(seed))) for seed in range(SWEEP_SIZE))
    assert SWEEP_SIZE * 0.15 < vouched < SWEEP_SIZE * 0.9


def _vector_lines(spec_examples: Path) -> list[tuple[bytes, frozenset[str]]]:
    """Every non-blank line of every input under ``examples/health`` and ``health_cases.jsonl``."""
    lines: list[tuple[bytes, frozenset[str]]] = []
    for folder in sorted((spec_examples / "health").iterdir()):
        if not folder.is_dir():
            continue
        ignored = frozenset(json.loads((folder / "args.json").read_text())["ignored_checks"])
        for path in sorted(folder.rglob("*.jsonl")):
            if "expected" not in path.relative_to(folder).parts:
                lines += [(line, ignored) for line in path.read_bytes().split(b"\n") if line.strip()]
    with (spec_examples / "health_cases.jsonl").open("rb") as handle:
        for case in map(json.loads, handle):
            ignored = frozenset(case["ignored_checks"])
            lines += [(line, ignored) for line in case["input_jsonl"].encode().split(b"\n") if line.strip()]
    return lines


def test_conformance_vectors(spec_examples: Path) -> None:
    lines = _vector_lines(spec_examples)
    assert len(lines) >= 160  # 80 rows in the folders and again in health_cases.jsonl
    vouched = [assert_paths_agree(line, ignored) for line, ignored in lines]
    assert sum(vouched) > len(lines) // 2
    for line, _ in lines:  # and with every check ignored but one
        assert_paths_agree(line, frozenset(ROLLOUT_CHECK_IDS) - {"record_unreadable"})


# --------------------------------------------------------------------------------------------
# 8. The fast path is actually taken


def test_synthetic_corpus_covers_every_fault() -> None:
    faults = {item.fault for item in synthetic_corpus()}
    assert {name for name, _ in FaultRates().items()} <= faults
    assert {item.kind for item in synthetic_corpus()} == {"result", "failure", "unreadable"}


def test_synthetic_rows_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every readable row with a valid trajectory is vouched for: ``digest_line`` never parses it with
    orjson (realistic full-size rows included); torn lines are parsed, and so are invalid trajectories
    unless the rejection path proves them invalid."""
    parsed: list[bytes] = []
    real_parse_line = health.digest.parse_line

    def counting_parse_line(data: bytes) -> Any:
        parsed.append(data)
        return real_parse_line(data)

    monkeypatch.setattr(health.digest, "parse_line", counting_parse_line)
    deferring = {"invalid_trajectory", "unreadable_line"}
    corpus = synthetic_corpus()
    for item in corpus:
        parsed.clear()
        assert_same_digest(digest_line_at(item.line), full_path_digest(item.line), item.line)
        rejected = isinstance(read_stripped_line(item.line.strip()), RejectedRecord)
        assert not rejected or item.fault == "invalid_trajectory", (item.kind, item.fault)
        assert (not parsed) == (item.fault not in deferring or rejected), (item.kind, item.fault)
    assert sum(item.fault is None and item.kind == "result" for item in corpus) >= 20
    full_size = [
        orjson.dumps(row) for row in generate_rows(SyntheticConfig(num_tasks=3, repeats_per_task=1), 5)
    ]
    assert min(map(len, full_size)) > 20_000
    for line in full_size:
        parsed.clear()
        assert_same_digest(digest_line_at(line), full_path_digest(line), line)
        assert not parsed


IGNORED_SETS = [
    frozenset({"record_unreadable"}),
    frozenset({"agent_turn_hollow", "model_call_failed", "check_execution_error"}),
    frozenset({"rollout_duplicate_identity", "task_consistently_unhealthy", "not_a_check"}),
    frozenset(ROLLOUT_CHECK_IDS),
]


@pytest.mark.parametrize("ignored", IGNORED_SETS, ids=["unreadable", "three_checks", "task_level", "all"])
def test_ignored_checks(ignored: frozenset[str]) -> None:
    for item in synthetic_corpus():
        vouched = assert_paths_agree(item.line, ignored)
        assert vouched == (item.fault not in ("invalid_trajectory", "unreadable_line"))
    assert assert_paths_agree(TEMPLATE.render(), ignored)
    assert assert_paths_agree(_line(((*LENGTH_CALL, "response"), {})), ignored)


def test_value_slots_are_all_exercised() -> None:
    assert {slot for slot, _ in EMBEDDINGS.values()} == set(VALUE_DEFAULTS)
    assert fast_path_digest(b"{}") == full_path_digest(b"{}")


_EVERYDAY_RUN_SCRIPT = """
import sys
import orjson
from health.digest import digest_line
from tests.sidecar.synthetic_support import SyntheticConfig, generate_events

config = SyntheticConfig(num_tasks=10, repeats_per_task=4)
lines = [orjson.dumps(e.row) for e in generate_events(config, 5) if e.row is not None]
for number, line in enumerate(lines, start=1):
    digest_line(line, source_path="r.jsonl", source_index=0, line_number=number, ordinal=number - 1)
print(len(lines), "health.contract.models" in sys.modules)
"""


def test_everyday_rows_are_digested_without_building_the_pydantic_contract() -> None:
    """A worker builds the contract's models only for a row that needs the full path."""
    completed = subprocess.run(
        [sys.executable, "-c", _EVERYDAY_RUN_SCRIPT], capture_output=True, text=True, check=True
    )
    digested, models_built = completed.stdout.split()
    assert int(digested) >= 40
    assert models_built == "False"
