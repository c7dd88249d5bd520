"""Stripping JSONL lines without copies."""

from __future__ import annotations

import pytest

from health.jsonl import stripped


@pytest.mark.parametrize(
    "data",
    [b"", b"  ", b"{}", b" {} ", b"\t\x0b{x}\r\n", b"x", b"{ ", b" }", b"\xa0{}\x85", b" \x0c\x0b\r\n\t"],
)
def test_stripped_views_match_bytes_strip(data: bytes) -> None:
    view = memoryview(bytearray(b"<" + data + b">"))[1:-1]
    result = stripped(view)
    assert isinstance(result, memoryview)
    assert bytes(result) == data.strip() == stripped(data)
