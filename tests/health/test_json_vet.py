"""``health.json_vet``: the native vetter accepts exactly what orjson reads to msgspec's values.

The oracle is the two libraries themselves: a document is acceptable when ``orjson.loads``
succeeds and ``msgspec.json.decode`` yields the same values (same types, floats bit for bit),
nested at most ``max_depth`` containers, and every integer literal in it lies in the 64-bit
range (the documented contract: also one a later duplicate key hides, which the vetter
refuses on purpose). The native vetter must equal the oracle on every input; the simdjson
fallback must never accept what the oracle refuses.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from health import json_vet
from health.json_vet import MAX_DEPTH, native_vet, simdjson_vet, vet

from .fast_path_support import synthetic_corpus
from .test_fast_path import VALUE_EDGES

try:
    from health._json_vet import vet_compact
except ImportError:
    vet_compact = None  # type: ignore[assignment]

NOT_BUILT = "health._json_vet is not built (installed without a C compiler): health.json_vet uses simdjson"
needs_native = pytest.mark.skipif(native_vet is None, reason=NOT_BUILT)

VetFunction = Callable[[bytes | bytearray | memoryview, int], bool]
VETTERS: list[Any] = [
    pytest.param(native_vet, id="native", marks=needs_native),
    pytest.param(simdjson_vet, id="simdjson"),
]


# --------------------------------------------------------------------------------------------
# The oracle


def _same(left: Any, right: Any) -> bool:
    """Equal values of the same types; floats bit for bit (``-0.0`` is not ``0.0``)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        return struct.pack("<d", left) == struct.pack("<d", right)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    return bool(left == right)


def _depth(value: Any) -> int:
    """Containers nested: a scalar 0, ``{}`` 1, ``[[1]]`` 2."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|(-?[0-9]+)((?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)')
"""A string (skipped whole) or a number: its integer part, then its fraction and exponent."""


def _integer_literals_in_range(data: bytes) -> bool:
    """Every integer literal of a document orjson accepted (also one a later duplicate key
    hides) lies in ``[-2**63, 2**64 - 1]``: read from the text, not from either library's
    value, which keeps only the last duplicate."""
    for match in _TOKEN.finditer(data):
        digits, rest = match.groups()
        if digits is None or rest:
            continue
        if len(digits) > 21 or not -(2**63) <= int(digits) <= 2**64 - 1:  # (int() caps its digits)
            return False
    return True


def oracle(data: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """orjson accepts ``data`` with the values msgspec decodes, within ``max_depth``, every
    integer literal in range (shallow documents only: msgspec's decode recurses in Python's
    stack)."""
    try:
        value = orjson.loads(data)
        decoded = msgspec.json.decode(data)
    except (orjson.JSONDecodeError, msgspec.DecodeError):
        return False
    return _same(value, decoded) and _depth(value) <= max_depth and _integer_literals_in_range(data)


def assert_vets_like_the_oracle(data: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """The native vetter equals the oracle; the fallback never accepts more. Returns the answer."""
    expected = oracle(data, max_depth)
    if native_vet is not None:
        assert native_vet(data, max_depth) == expected, (data[:300], max_depth)
        # the vetter's pass that also copies the line refuses exactly the same documents
        assert (vet_compact(data, max_depth) is not False) == expected, (data[:300], max_depth)
    if simdjson_vet(data, max_depth):
        # (the fallback's wrapping admits "1],[2" below 1024: a single document never is that)
        assert expected or (max_depth < MAX_DEPTH and not _one_text(data)), (data[:300], max_depth)
    return expected


def _one_text(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Explicit edge cases, every class

EDGES: list[tuple[str, bytes, bool]] = [
    # document framing
    ("empty", b"", False),
    ("only_whitespace", b" \t\r\n", False),
    ("bom_object", b"\xef\xbb\xbf{}", False),
    ("bom_after_space", b" \xef\xbb\xbf{}", False),
    ("trailing_content", b"{} x", False),
    ("two_values", b"{}{}", False),
    ("two_values_comma", b"{},{}", False),
    ("closes_a_wrapping", b"1],[2", False),
    ("whitespace_all_four", b" \t\r\n{ \t\r\n\"a\" \t\r\n: \t\r\n[ 1 , 2 ] \t\r\n} \t\r\n", True),
    ("form_feed_inside", b'{"a":\x0c1}', False),
    ("nul_after", b"{}\x00", False),
    ("nbsp_inside", b'{"a":\xc2\xa01}', False),
    # literals
    ("literals", b"[true,false,null]", True),
    ("literal_prefix", b"[tru]", False),
    ("literal_suffix", b"[truee]", False),
    ("literal_at_end", b"nul", False),
    ("literal_upper", b"[False]", False),
    # containers
    ("colon_in_array", b"[1:2]", False),
    ("comma_only", b"[,]", False),
    ("leading_comma", b"[,1]", False),
    ("double_comma", b"[1,,2]", False),
    ("missing_value", b'{"a":}', False),
    ("missing_key", b'{:1}', False),
    ("unquoted_key", b"{a:1}", False),
    ("single_quotes", b"{'a':1}", False),
    ("mismatched_closer", b"[1}", False),
    ("mismatched_closer_object", b'{"a":1]', False),
    ("unclosed_nested", b'{"a":[1,{"b":2}', False),
    # strings
    ("unterminated", b'"abc', False),
    ("escape_at_end", b'"abc\\', False),
    ("unicode_escape_at_end", b'"\\u00', False),
    ("high_surrogate_at_end", b'"\\ud83d', False),
    ("high_surrogate_then_backslash_at_end", b'"\\ud83d\\', False),
    ("high_surrogate_then_escape_n", b'"\\ud83d\\n"', False),
    ("lowest_high_highest_low", b'"\\ud800\\udfff"', True),
    ("highest_high_lowest_low", b'"\\udbff\\udc00"', True),
    ("just_below_surrogates", b'"\\ud7ff"', True),
    ("just_above_surrogates", b'"\\ue000"', True),
    ("hex_mixed_case", b'"\\uAbCd"', True),
    ("hex_g", b'"\\u00g0"', False),
    ("raw_del", b'"\x7f"', True),
    ("raw_unit_separator", b'"\x1f"', False),
    ("utf8_2byte_max", b'"\xdf\xbf"', True),
    ("utf8_3byte_min", b'"\xe0\xa0\x80"', True),
    ("utf8_last_before_surrogates", b'"\xed\x9f\xbf"', True),
    ("utf8_first_after_surrogates", b'"\xee\x80\x80"', True),
    ("utf8_4byte_min", b'"\xf0\x90\x80\x80"', True),
    ("utf8_f5", b'"\xf5\x80\x80\x80"', False),
    ("utf8_truncated_3byte_before_quote", b'"\xe2\x82"', False),
    ("utf8_truncated_at_end", b'"\xf0\x9f\x98', False),
    ("utf8_bad_third_byte", b'"\xe2\x82\x41"', False),
    ("utf8_bad_fourth_byte", b'"\xf0\x9f\x98\x41"', False),
    ("utf8_lead_then_quote", b'"\xc3"', False),
    ("utf8_outside_string", b'[1,\xc3\xa9]', False),
    ("long_plain_then_escape", b'"' + b"a" * 37 + b"\\n" + b"b" * 40 + b'"', True),
    ("long_plain_then_control", b'"' + b"a" * 37 + b"\x01" + b"b" * 40 + b'"', False),
    ("long_plain_then_utf8", b'"' + b"a" * 31 + "é€😀".encode() * 9 + b"b" * 17 + b'"', True),
    # numbers: syntax
    ("zero", b"0", True),
    ("minus_zero_exponent", b"-0e-0", True),
    ("fraction_then_exponent", b"-12.5E-3", True),
    ("exponent_plus", b"1e+5", True),
    ("minus_then_space", b"- 1", False),
    ("dot_exponent", b"1.e5", False),
    ("double_dot", b"1.2.3", False),
    ("double_exponent", b"1e5e5", False),
    ("exponent_dot", b"1e5.5", False),
    ("leading_zero_fraction", b"00.5", False),
    ("zero_then_digits_in_array", b"[0,01]", False),
    # numbers: integer range
    ("i64_min", str(-(2**63)).encode(), True),
    ("i64_min_minus_1", str(-(2**63) - 1).encode(), False),
    ("u64_max", str(2**64 - 1).encode(), True),
    ("u64_max_plus_1", str(2**64).encode(), False),
    ("twenty_nines", b"9" * 20, False),
    ("nineteen_nines", b"9" * 19, True),
    ("minus_nineteen_nines", b"-" + b"9" * 19, False),
    ("big_int_as_float", str(2**64).encode() + b".0", True),
    ("big_int_exponent", b"1e30", True),
    # an out-of-range integer a later duplicate key hides: both libraries read {"a": 0}, but the
    # contract covers every literal (a deliberate refusal: the full path reads it)
    ("hidden_i64_min_minus_1", b'{"a":-9223372036854775809,"a":0}', False),
    ("hidden_u64_max_plus_1", b'{"a":[18446744073709551616],"a":0}', False),
    ("hidden_in_range", b'{"a":-9223372036854775808,"a":0}', True),
    ("later_duplicate_out_of_range", b'{"a":0,"a":18446744073709551616}', False),
    ("digits_in_a_key_are_no_literal", b'{"18446744073709551616":1}', True),
    # numbers: float range
    ("max_double", b"1.7976931348623157e308", True),
    ("max_double_rounded", b"1.7976931348623158e308", True),
    ("just_below_halfway", b"1.7976931348623158079e308", True),
    ("just_above_halfway", b"1.7976931348623158080e308", False),
    ("halfway_shifted", b"0.00017976931348623159e312", False),
    ("below_halfway_shifted", b"0.00017976931348623157e312", True),
    ("integer_part_overflow", b"2" + b"0" * 308 + b".0", False),
    ("integer_part_finite", b"1" + b"0" * 307 + b".0", True),
    ("e308", b"1e308", True),
    ("e309", b"1e309", False),
    ("huge_exponent", b"1e99999999999999999999999", False),
    ("huge_negative_exponent", b"1e-99999999999999999999999", True),
    ("zero_huge_exponent", b"0.000e99999999999999999999", True),
    ("long_zero_fraction_then_digit", b"0." + b"0" * 400 + b"1e400", True),
    ("long_zero_fraction_then_digit_overflows", b"0." + b"0" * 400 + b"1e710", False),
    ("smallest_subnormal", b"5e-324", True),
    ("below_smallest_subnormal", b"1e-325", True),
]


@pytest.mark.parametrize(("data", "accepted"), [pytest.param(d, a, id=i) for i, d, a in EDGES])
def test_edge_cases(data: bytes, accepted: bool) -> None:
    assert assert_vets_like_the_oracle(data) == accepted  # the table is right, and the vetter agrees
    assert_vets_like_the_oracle(b'{"k":[' + data + b"]}")
    assert_vets_like_the_oracle(b'{"k":"' + b"p" * 21 + b'","v":' + data + b"}")


@pytest.mark.parametrize(("data", "plain"), [pytest.param(d, p, id=i) for i, d, p in VALUE_EDGES])
def test_the_fast_path_edge_values(data: bytes, plain: bool) -> None:
    """The fast path's table (``plain``: orjson reads it, and to msgspec's values)."""
    for document in (data, b"[" + data + b"]", b'{"a":' + data + b',"b":"' + b"x" * 40 + b'"}'):
        assert_vets_like_the_oracle(document)
    if plain:
        assert oracle(data)


# --------------------------------------------------------------------------------------------
# Depth


@needs_native
@pytest.mark.parametrize("levels", [*range(6), *range(255, 260), *range(1021, 1027)])
@pytest.mark.parametrize("kind", ["array", "object"])
@pytest.mark.parametrize("leaf", [b"1", b"", b'"s"'])
def test_depth_counts_containers_exactly(levels: int, kind: str, leaf: bytes) -> None:
    """Within the limit exactly when at most that many containers nest, scalar leaf or none;
    past 1024 never (orjson's own limit)."""
    opener, closer = (b"[", b"]") if kind == "array" else (b'{"k":', b"}")
    if leaf:
        document = opener * levels + leaf + closer * levels
    else:  # the innermost container empty
        inner = b"[]" if kind == "array" else b"{}"
        document = opener * (levels - 1) + inner + closer * (levels - 1) if levels else b"null"
    for limit in {0, 1, levels - 1, levels, levels + 1, 257, 1024, 1025, 10**9}:
        if limit >= 0:
            assert native_vet is not None
            assert native_vet(document, limit) == (levels <= min(limit, 1024)), (levels, limit)
    if levels <= 1024:
        orjson.loads(document)  # orjson's limit is the same
    else:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(document)


@pytest.mark.parametrize("vetter", VETTERS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_never_deeper_than_the_limit(vetter: VetFunction, data: st.DataObject) -> None:
    """Both vetters: never past the limit; the native one also up to it (the fallback may
    refuse at it)."""
    value = data.draw(_json_values)
    document = json.dumps(value).encode()
    limit = data.draw(st.integers(0, 8))
    depth = _depth(value)
    accepted = vetter(document, limit)
    assert not accepted or depth <= limit
    if vetter is native_vet or depth < limit:
        assert accepted == oracle(document, limit)


# --------------------------------------------------------------------------------------------
# Generated documents, numbers, strings, and mutations of real rows

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-(2**64) - 3, -(2**63) + 3)
    | st.integers(2**64 - 3, 2**64 + 3)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(_json_values, st.booleans(), st.sampled_from([None, 0, 2]))
def test_generated_documents(value: Any, ascii_only: bool, indent: int | None) -> None:
    """Every document the stdlib writes (huge integers included), escaped or raw UTF-8."""
    document = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode("utf-8", "surrogatepass")
    assert_vets_like_the_oracle(document)


_digits = st.text(alphabet="0123456789", min_size=1, max_size=30)
_numbers = st.builds(
    lambda sign, integer, fraction, exponent: sign + integer + fraction + exponent,
    st.sampled_from(["", "-", "+", "--"]),
    _digits | st.sampled_from(["", "0", "00", "9" * 20, "18446744073709551615", "9223372036854775808"]),
    st.sampled_from(["", "."]) | _digits.map(lambda digits: "." + digits),
    st.sampled_from(["", "e", "E+", "e-"])
    | st.builds(
        lambda mark, sign, digits: mark + sign + digits,
        st.sampled_from("eE"),
        st.sampled_from(["", "+", "-"]),
        _digits | st.integers(300, 330).map(str) | st.integers(-340, -300).map(lambda n: str(-n)),
    ),
)


@settings(max_examples=600, deadline=None)
@given(_numbers)
def test_generated_numbers(number: str) -> None:
    """Number syntax, the 64-bit integer range and overflow to infinity."""
    assert_vets_like_the_oracle(number.encode())
    assert_vets_like_the_oracle(b"[" + number.encode() + b",1]")


_HALFWAY = str(2**1024 - 2**970)


@settings(max_examples=300, deadline=None)
@given(st.integers(-3, 3), st.integers(1, 330), st.integers(-2, 2), st.sampled_from(["", "0000", "0001"]))
def test_numbers_at_the_overflow_boundary(nudge: int, digits: int, shift: int, tail: str) -> None:
    """Decimal values within a few units of the halfway point to 2**1024, written three ways."""
    significant = str(int(_HALFWAY[:digits]) + nudge) + tail
    if len(significant) != digits + len(tail):
        return  # the nudge carried into another digit
    for written in (
        f"{significant[0]}.{significant[1:] or '0'}e{308 + shift}",
        f"-0.{significant}e{309 + shift}",
        f"{significant}e{308 + shift - (len(significant) - 1)}",
    ):
        assert_vets_like_the_oracle(written.encode())


_STRING_BYTES = st.sampled_from(
    [b"a", b" ", b'"', b"\\", b"\\u", b"d8", b"dc", b"00", b"\\n", b"\\ud83d", b"\\ude00", b"\x00", b"\x1f",
     b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc2", b"\xdf", b"\xe0", b"\xa0", b"\xed", b"\x9f", b"\xef",
     b"\xf0", b"\x90", b"\xf4", b"\x8f", b"\xf5", b"\xff", "é".encode(), "😀".encode()]
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_STRING_BYTES, max_size=24), st.integers(0, 20))
def test_generated_string_bytes(pieces: list[bytes], padding: int) -> None:
    """UTF-8 validity, control bytes and escapes, at every offset of the 16-byte scan."""
    body = b"x" * padding + b"".join(pieces)
    assert_vets_like_the_oracle(b'"' + body + b'"')
    assert_vets_like_the_oracle(b'{"' + body + b'":"' + b"y" * padding + b'"}')


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=90), st.integers(0, 400), st.lists(_STRING_BYTES, max_size=2), st.integers(0, 3))
def test_long_non_ascii_runs(text: str, where: int, inserted: list[bytes], cut: int) -> None:
    """Text of any script, 16-byte chunks and their tails, with a stray byte or a cut sequence
    somewhere inside (the run is validated as a whole from its first non-ASCII byte)."""
    body = text.encode("utf-8", "surrogatepass")
    at = where % (len(body) + 1)
    body = body[:at] + b"".join(inserted) + body[at:]
    body = body[: len(body) - cut] if cut and len(body) > cut else body
    for document in (b'"' + body + b'"', b'{"k":"' + body + b'","v":"\\u00e9' + body + b'"}'):
        assert_vets_like_the_oracle(document)


_EDIT_BYTES = b'"\\{}[],:-+.eE0159 \t\n\r\x00\x0b\x1f\x7f\x80\xa0\xbf\xc0\xc3\xe2\xed\xf0\xf4\xf5\xffutnl/'


def _mutated(document: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Each edit at a relative position: replace a byte, insert one, delete one, or truncate."""
    data = bytearray(document)
    for operation, where, byte in edits:
        if not data:
            break
        position = where % len(data)
        if operation == 0:
            data[position] = _EDIT_BYTES[byte % len(_EDIT_BYTES)]
        elif operation == 1:
            data.insert(position, _EDIT_BYTES[byte % len(_EDIT_BYTES)])
        elif operation == 2:
            del data[position]
        else:
            del data[position:]
    return bytes(data)


_edits = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2**32), st.integers(0, 255)), min_size=1, max_size=3
)


@settings(max_examples=400, deadline=None)
@given(_json_values, _edits)
def test_mutated_generated_documents(value: Any, edits: list[tuple[int, int, int]]) -> None:
    document = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    assert_vets_like_the_oracle(_mutated(document, edits))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), _edits)
def test_mutated_real_rows(data: st.DataObject, edits: list[tuple[int, int, int]]) -> None:
    """The synthetic corpus' lines (results with faults, failure rows, torn lines), byte-flipped."""
    line = data.draw(st.sampled_from(synthetic_corpus())).line
    assert_vets_like_the_oracle(_mutated(line, edits))
    assert_vets_like_the_oracle(_mutated(line, edits), 257)


def test_every_corpus_line_as_is() -> None:
    """No everyday row is refused: the speed depends on it."""
    for item in synthetic_corpus():
        assert assert_vets_like_the_oracle(item.line) == _one_text(item.line)


_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_REPO = Path(__file__).resolve().parents[2]


@functools.cache
def _vector_lines() -> tuple[bytes, ...]:
    """Every line of the conformance vectors and the sample run (torn and invalid lines included)."""
    sample_run = _REPO / "sidecar" / "demo" / "sample_run"
    files = sorted(_FIXTURES.rglob("*.jsonl")) + sorted(sample_run.glob("*.jsonl"))
    return tuple(line.rstrip(b"\r\n") for path in files for line in path.read_bytes().splitlines())


def test_every_conformance_vector_line() -> None:
    lines = _vector_lines()
    assert len(lines) > 200
    for line in lines:
        for limit in (MAX_DEPTH, 257, 4):
            assert_vets_like_the_oracle(line, limit)


@settings(max_examples=200, deadline=None)
@given(st.data(), _edits)
def test_mutated_conformance_vector_lines(data: st.DataObject, edits: list[tuple[int, int, int]]) -> None:
    assert_vets_like_the_oracle(_mutated(data.draw(st.sampled_from(_vector_lines())), edits))


# --------------------------------------------------------------------------------------------
# The call: buffers, arguments, large inputs


@needs_native
def test_reads_any_contiguous_buffer_within_its_bounds() -> None:
    assert native_vet is not None
    assert native_vet(bytearray(b'{"a":1}'), 1)
    tail = memoryview(b'{"a":"bc"}xyz')
    assert native_vet(tail[:10], 1) and not native_vet(tail, 1)
    assert not native_vet(memoryview(b'"abc"')[:4], 0)  # the closing quote lies past the view
    assert not native_vet(memoryview(b"1e5")[:2], 0)  # "1e": the exponent's digits lie past it
    with pytest.raises(BufferError):
        native_vet(memoryview(b"[1, 2]")[::2], 1)
    with pytest.raises(TypeError):
        native_vet("{}", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="-1"):
        native_vet(b"{}", -1)
    with pytest.raises(TypeError):
        native_vet(b"{}", 1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("vetter", VETTERS)
def test_large_documents_across_threads(vetter: VetFunction) -> None:
    """Past 1 MiB the native vetter runs without the GIL: answers stay right in parallel."""
    good = orjson.dumps({"rows": [{"text": "plain text " * 40, "n": n, "é": "😀" * 5} for n in range(3000)]})
    bad = good[:-200] + b"\xff" + good[-199:]
    assert len(good) > 1 << 20
    results: list[tuple[bool, bool]] = []

    def work() -> None:
        results.extend((vetter(good, 4), vetter(bad, 4)) for _ in range(3))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(True, False)] * 9


def test_vet_is_the_built_vetter() -> None:
    assert ("simdjson" if native_vet is None else "native") == json_vet.VETTER
    assert vet(b'{"a":[1]}', 3) and not vet(b'{"a":[1]}', 1)  # (the fallback may refuse at 2)
    assert not vet(b'{"a":1e400}') and not math.isinf(orjson.loads(b"1e308"))
