"""The JSON bodies: the event count and depth checked while reading, and the report's chunked serializer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.http.json_bodies import BodyTooDeep, EventCounter, TooManyEvents, dumps_json, dumps_report

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


def _fed(body: bytes, size: int, max_events: int = 10**9, max_depth: int = 1024) -> EventCounter:
    counter = EventCounter(max_events, max_depth)
    for start in range(0, len(body), size):
        counter.feed(body[start : start + size])
    return counter


class TestEventCounter:
    def test_counts_events_and_ignores_brackets_and_commas_in_strings(self) -> None:
        body = orjson.dumps([{"a": [1, {"b": "[[,{{{"}]}, "\\", ['"]],\\"'], [[]]])
        for size in (1, 2, 3, 7, len(body)):
            assert _fed(body, size).events == 4
            assert _fed(orjson.dumps({"events": orjson.loads(body)}), size).events == 4

    @settings(max_examples=150, deadline=None)
    @given(st.lists(_json_values, min_size=1, max_size=6), st.integers(1, 9))
    def test_count_and_depth_equal_the_structure_however_the_body_is_cut(
        self, events: list[Any], size: int
    ) -> None:
        body = orjson.dumps(events)
        depth = _depth(events)
        assert _fed(body, size, max_depth=depth).events == len(events)
        with pytest.raises(BodyTooDeep):
            _fed(body, size, max_depth=depth - 1)

    def test_refuses_past_the_cap_before_the_end(self) -> None:
        counter = EventCounter(3, 10)
        counter.feed(b'[{"kind":"a"},{},')
        with pytest.raises(TooManyEvents, match="more than 3 events"):
            counter.feed(b"{},{}")


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
