"""``health.json_vet.vet``: True only where orjson reads the document with msgspec's values."""

from __future__ import annotations

import pytest

from health.json_vet import MAX_DEPTH, may_nest_deeper, vet


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": [1, 2.5, "x", null, true]}', True),
        (b"[]", True),
        (b'{"a": 1e400}', False),  # overflows to infinity: orjson refuses
        (b'"\\ud800"', False),  # lone surrogate escape
        (b'"\xff"', False),  # invalid UTF-8
        (b"\xef\xbb\xbf{}", False),  # BOM
        (b"[NaN]", False),
        (b'{"a": 18446744073709551615}', True),  # 2**64 - 1: an integer for both
        (b'{"a": 18446744073709551616}', False),  # orjson reads a float, msgspec an integer
        (b'{"a": -9223372036854775809}', False),
        (b"{", False),
    ],
)
def test_acceptance(data: bytes, expected: bool) -> None:
    assert vet(data) is expected


def test_depth() -> None:
    assert vet(b"[[[]]]", 3)
    assert not vet(b"[[[]]]", 2)
    assert not vet(b"[[[1]]]", 3)  # simdjson counts the scalar as a level: refused (safe)
    assert not vet(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="max_depth"):
        vet(b"[]", -1)


def test_may_nest_deeper_clears_what_surely_fits_and_flags_the_rest() -> None:
    assert not may_nest_deeper(b"[[[]]]", 3)
    assert may_nest_deeper(b"[[[1]]]", 3)  # (the scalar's level: the caller counts exactly)
    assert may_nest_deeper(b"[[[[]]]]", 3)
    assert not may_nest_deeper(b"[1,", 3)  # not JSON: no depth answer
