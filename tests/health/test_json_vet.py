"""``health.json_vet.vet``: True only where orjson reads the document with msgspec's values."""

from __future__ import annotations

import pytest

from health.json_vet import MAX_DEPTH, vet, vet_event_rows


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


def test_event_rows_vet_the_body_whole() -> None:
    assert vet_event_rows(b'[{"row": {"a": 1}}]') is True
    assert vet_event_rows(b'[{"row": 1e400}]') is False
