"""``health._json_vet.vet_compact`` against orjson on thousands of seeded mutations of real lines.

The vetter's passes that also copy the line (``vet_compact``, and ``vet_lean``, which walks
more of it on the path) must refuse exactly what orjson refuses (or reads to other values than
msgspec, or finds too deep): the oracle of ``test_json_vet``. Every line
it accepts must be copied exactly as ``health._payload_spans.compact`` copies it. The lines are
synthetic rollout rows (and short documents) with seeded edits: byte flips (quotes,
backslashes, brackets, control and non-ASCII bytes), truncations, invalid UTF-8 and lone
surrogate escapes inside strings, numbers at the edges of orjson's ranges and forms, and
nesting around the depth limit.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import orjson
import pytest

from .fast_path_support import corpus_rows
from .test_json_vet import oracle

try:
    from health._json_vet import vet, vet_compact, vet_lean
    from health._payload_spans import compact
except ImportError:
    vet_compact = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(
    vet_compact is None, reason="health._json_vet is not built (no C compiler at install)"
)

_DEPTH = 257
"""The batch fast path's bound."""

_FLIP_BYTES = (
    b'"\\{}[]:,0123456789-+.eE \t\n\rtfnul\x00\x01\x1f\x7f\x80\xbf\xc0\xc2\xe0\xed\xef\xf0\xf4\xf5\xff'
)
_BAD_UTF8 = [
    b"\xc0\xaf",  # overlong '/'
    b"\xe0\x80\xaf",  # overlong
    b"\xed\xa0\x80",  # an encoded surrogate
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf8\x88\x80\x80\x80",
    b"\x80",  # a stray continuation byte
    b"\xe2\x82",  # truncated
    b"\xf0\x9f\x98",  # truncated
    b"\xc3\xa9",  # valid: e acute
    b"\xf0\x9f\x98\x80",  # valid: an emoji
    b"\xef\xbb\xbf",  # valid inside a string
]
_ESCAPES = [
    b"\\ud800",
    b"\\udc00",
    b"\\ud800\\udc00",
    b"\\udbff\\udfff",
    b"\\udc00\\ud800",
    b"\\ud800\\u0041",
    b"\\ud800\\",
    b"\\uD83D\\uDE00",
    b"\\u00e9",
    b"\\u12",
    b"\\u12g4",
    b"\\x41",
    b"\\'",
    b"\\/",
    b"\\\\",
    b'\\\\\\"',
    b"\\",
]
_NUMBERS = [
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-18446744073709551615",
    b"123456789012345678901",
    b"1.7976931348623157e308",
    b"1.7976931348623158e308",
    b"1.7976931348623159e308",
    b"17976931348623158079372897140530341507993413271003782693617377898044496829276475094664901797758720"
    b"70963302864166928879109465555478519404026306574886715058206819089020007083836762738548458177115317"
    b"64475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880"
    b"177904174497792.0",
    b"1e308",
    b"1e309",
    b"-1e309",
    b"1e-400",
    b"0.0e99999999999",
    b"4.9e-324",
    b"-0",
    b"-0.0",
    b"0e0",
    b"01",
    b"-01",
    b"1.",
    b".5",
    b"-",
    b"1e",
    b"1e+",
    b"+1",
    b"1E+2",
    b"0x10",
    b"NaN",
    b"Infinity",
    b"tru",
    b"nul",
    b"falsey",
]


def _lines() -> list[bytes]:
    return [orjson.dumps(row) for row in corpus_rows()[:60]]


def _string_positions(line: bytes, rng: random.Random) -> int:
    """A position just after an opening or closing quote (usually inside a string)."""
    for _ in range(20):
        at = line.find(b'"', rng.randrange(len(line)))
        if at >= 0:
            return at + 1
    return rng.randrange(len(line))


def _value_position(line: bytes, rng: random.Random) -> tuple[int, int] | None:
    """The span of some scalar value of the line (after a ':' or in an array)."""
    for _ in range(20):
        at = line.find(b":", rng.randrange(len(line)))
        if at < 0:
            continue
        start = at + 1
        end = start
        while end < len(line) and line[end : end + 1] not in (b",", b"}", b"]"):
            end += 1
        if line[start : start + 1] not in (b"{", b"[", b'"'):
            return start, end
    return None


_OUT_OF_RANGE = [b"-9223372036854775809", b"18446744073709551616", b"[99999999999999999999]"]


def _duplicate_key_hiding(line: bytes, rng: random.Random) -> bytes:
    """An object member repeated before itself with an out-of-range integer (or an in-range
    one) that the later value hides: both libraries keep the later value, the contract
    refuses the literal."""
    for _ in range(20):
        at = line.find(b'":', rng.randrange(len(line)))
        if at < 0:
            continue
        key_start = line.rfind(b'"', 0, at)
        before = line[key_start - 1 : key_start]
        if key_start <= 0 or before not in (b"{", b","):
            continue
        value = rng.choice([*_OUT_OF_RANGE, b"-9223372036854775808", b"0"])
        return line[:key_start] + line[key_start : at + 2] + value + b"," + line[key_start:]
    return line


def _mutated(line: bytes, rng: random.Random) -> bytes:
    if not line:  # a chain of edits may have cut it all
        return line
    kind = rng.randrange(8)
    if kind == 7:  # a duplicate key hiding an out-of-range integer
        return _duplicate_key_hiding(line, rng)
    if kind == 0:  # byte flips anywhere
        data = bytearray(line)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = _FLIP_BYTES[rng.randrange(len(_FLIP_BYTES))]
        return bytes(data)
    if kind == 1:  # truncation (or a trailing byte)
        cut = rng.randrange(len(line) + 1)
        return line[:cut] + (rng.choice([b"", b" ", b"}", b"]", b"x"]) if cut == len(line) else b"")
    if kind == 2:  # raw UTF-8, valid or not, inside a string
        at = _string_positions(line, rng)
        return line[:at] + rng.choice(_BAD_UTF8) + line[at:]
    if kind == 3:  # escapes, lone surrogates included
        at = _string_positions(line, rng)
        return line[:at] + rng.choice(_ESCAPES) + line[at:]
    if kind == 4:  # a number at the edge of orjson's ranges or forms
        span = _value_position(line, rng)
        if span is None:
            return line
        return line[: span[0]] + rng.choice(_NUMBERS) + line[span[1] :]
    if kind == 5:  # bytes after a backslash near block boundaries, quotes inside payloads
        at = _string_positions(line, rng)
        run = b"\\" * rng.randint(1, 5) + rng.choice([b'"', b"n", b"u0041", b"\\", b""])
        return line[:at] + run + line[at:]
    # whitespace, legal or not, between tokens
    at = line.find(b",", rng.randrange(len(line)))
    if at < 0:
        return line
    return line[:at] + rng.choice([b" ", b"\t\r\n", b"\x0c", b"\xc2\xa0", b"\x00"]) + line[at:]


def _as_bytes(found: Any) -> Any:
    if found is None or found is False:
        return found
    copy, requests, responses = found
    return copy, [None if r is None else bytes(r) for r in (*requests, *responses)], len(requests)


def _assert_agrees(document: bytes) -> bool:
    expected = oracle(document, _DEPTH)
    found = vet_compact(document, _DEPTH)
    assert (found is not False) == expected, document[:300]
    assert (vet_lean(document, _DEPTH) is not False) == expected, document[:300]
    assert vet(document, _DEPTH) == expected, document[:300]
    if expected:
        assert _as_bytes(found) == _as_bytes(compact(document)), document[:300]
    return expected


@pytest.mark.parametrize("seed", range(16))
def test_mutated_lines_are_refused_exactly_where_orjson_refuses_them(seed: int) -> None:
    rng = random.Random(20261203 + seed)
    lines = _lines()
    accepted = refused = 0
    for _ in range(400):
        document = rng.choice(lines)
        for _ in range(rng.randint(1, 2)):
            document = _mutated(document, rng)
        if _assert_agrees(document):
            accepted += 1
        else:
            refused += 1
    # the mutations reach both answers (a generator that only breaks lines proves little)
    assert accepted > 20 and refused > 100, (accepted, refused)


@pytest.mark.parametrize("seed", range(4))
def test_short_documents_from_the_same_pieces(seed: int) -> None:
    rng = random.Random(7 + seed)
    pieces = [*_NUMBERS, *(b'"' + e + b'"' for e in _ESCAPES), *(b'"' + u + b'"' for u in _BAD_UTF8)]
    pieces += [b"true", b"false", b"null", b"{}", b"[]", b'"s"', b"{", b"}", b"[", b"]", b",", b":"]
    for _ in range(1000):
        parts = [rng.choice(pieces) for _ in range(rng.randint(1, 6))]
        body = rng.choice([b",", b" , ", b""]).join(parts)
        document = rng.choice([b"[%s]", b'{"a":%s}', b"%s", b' {"ng_trajectory":{"model_calls":[%s]}} '])
        _assert_agrees(document.replace(b"%s", body))


@pytest.mark.parametrize("seed", range(4))
def test_duplicate_keys_hiding_out_of_range_integers(seed: int) -> None:
    """The documented contract: every integer literal in range, also one a later duplicate
    key hides (a deliberate, safe refusal), whatever the other edits."""
    rng = random.Random(31 + seed)
    lines = _lines()
    hidden = 0
    for _ in range(300):
        document = _duplicate_key_hiding(rng.choice(lines), rng)
        if rng.random() < 0.3:
            document = _mutated(document, rng)
        if not _assert_agrees(document) and _one_text(document):
            hidden += 1  # orjson reads it, the contract refuses it: a hidden literal
    assert hidden > 20, hidden


def _one_text(document: bytes) -> bool:
    try:
        orjson.loads(document)
    except orjson.JSONDecodeError:
        return False
    return True


@pytest.mark.parametrize("depth", [1, 2, 100, 255, 256, 257, 258, 300])
def test_nesting_around_the_depth_limit(depth: int) -> None:
    for opener, closer, leaf in ((b"[", b"]", b"1"), (b'{"a":', b"}", b"[]"), (b"[", b"]", b"")):
        document = opener * depth + leaf + closer * depth
        _assert_agrees(document)
        _assert_agrees(document[:-1])
        row = orjson.dumps(corpus_rows()[0])
        nested_row = row[:-1] + b',"extra":' + document + b"}"
        _assert_agrees(nested_row)
        in_a_conversation = (  # on the lean copy's path all the way down
            b'{"ng_trajectory":{"task_id":"t","rollout_id":"r","invocations":[{"conversation":[{"content":'
            + document
            + b"}]}]}}"
        )
        _assert_agrees(in_a_conversation)


_FUZZ_SECONDS = float(os.environ.get("JSON_VET_FUZZ_SECONDS", "0"))
"""Set by ``.ci/sanitize.sh`` (a sanitizer build): how long to fuzz with fresh seeds."""


@pytest.mark.skipif(
    _FUZZ_SECONDS <= 0, reason="JSON_VET_FUZZ_SECONDS unset: the bounded fuzz runs in .ci/sanitize.sh"
)
def test_fuzz_for_a_bounded_time() -> None:
    """The seeded mutations above, from a fresh seed, for JSON_VET_FUZZ_SECONDS: under
    AddressSanitizer and UBSan any bad read or undefined behaviour aborts the run; every
    answer is still compared with the oracle (the seed is in the message to replay it)."""
    seed = int(os.environ.get("JSON_VET_FUZZ_SEED", str(time.time_ns() % 2**32)))
    rng = random.Random(seed)
    lines = _lines()
    until = time.monotonic() + _FUZZ_SECONDS
    checked = 0
    while time.monotonic() < until:
        document = rng.choice(lines)
        for _ in range(rng.randint(1, 3)):
            document = _mutated(document, rng)
        try:
            _assert_agrees(document)
        except AssertionError as error:
            raise AssertionError(f"JSON_VET_FUZZ_SEED={seed} after {checked} documents") from error
        checked += 1
    print(f"fuzzed {checked} documents from JSON_VET_FUZZ_SEED={seed}")
    assert checked > 0
