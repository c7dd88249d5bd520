"""The JSON bodies: the nesting-depth check before parsing, and the report's chunked serializer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.http.json_bodies import dumps_json, dumps_report, json_depth, too_deep

_json_values = st.recursive(
    st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet='[]{}"\\ab\n'),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='[]{"\\x'), inner, max_size=3)
    ),
    max_leaves=20,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    return 0


class TestJsonDepth:
    def test_counts_nesting_and_ignores_brackets_in_strings(self) -> None:
        assert json_depth(b'{"a": [1, {"b": "[[[{{{"}]}', 100) == 3
        assert json_depth(b'"\\"[[["', 100) == 0
        assert json_depth(b"[" * 50 + b"]" * 50, 10) == 11  # stops counting once past the limit
        assert json_depth(b"1", 10) == 0
        assert json_depth(orjson.dumps(["\\", ['"]]\\"'], [[]]])) == 3  # escaped backslash and quotes

    @settings(max_examples=150, deadline=None)
    @given(_json_values)
    def test_depth_equals_the_structure(self, value: Any) -> None:
        assert json_depth(orjson.dumps(value)) == _depth(value)

    def test_too_deep(self) -> None:
        assert not too_deep(b"[" * 10 + b"]" * 10, 10)
        assert too_deep(b"[" * 11 + b"]" * 11, 10)
        assert not too_deep(b'["' + b"[" * 40 + b'"]', 10)  # many brackets, all inside a string


class TestDumpsReport:
    """A report's per-task map is written in chunks: the bytes equal one ``dumps_json``."""

    @staticmethod
    def _report(tasks: int, total: int = 7) -> dict[str, Any]:
        entries = {
            str(index): {
                "repeats": 2,
                "healthy": index % 3,
                "unhealthy": 1,
                "unobserved": 0,
                "flags": ["f"] * (index % 2),
            }
            for index in range(tasks)
        }
        return {
            "run_id": "r",
            "quality_summary": {"run": {"verdicts": {"healthy": 1}}, "tasks": entries},
            "perf_summary": {"total_prompt_tokens": total},
            "after": [1.5, None, "é"],
        }

    @pytest.mark.parametrize("tasks", [0, 5, 2048, 2049, 5000])
    def test_same_bytes_as_one_dump(self, tasks: int) -> None:
        expected = dumps_json(self._report(tasks))
        report = self._report(tasks)
        assert dumps_report(report) == expected
        if tasks > 2048:
            assert report["quality_summary"]["tasks"] == {}  # freed entry by entry

    def test_an_integer_past_64_bits_elsewhere_still_renders(self) -> None:
        expected = dumps_json(self._report(3000, total=2**70))
        assert str(2**70).encode() in expected
        assert dumps_report(self._report(3000, total=2**70)) == expected
