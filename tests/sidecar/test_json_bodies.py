"""The JSON bodies: an ingest body split, counted and depth-checked while read; the report's serializer."""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.http.json_bodies import BodyTooDeep, EventSplitter, TooManyEvents, dumps_json, dumps_report

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


def _fed(body: bytes, size: int, max_events: int = 10**9, max_depth: int = 1024) -> list[msgspec.Raw]:
    splitter = EventSplitter(max_events, max_depth)
    for start in range(0, len(body), size):
        splitter.feed(body[start : start + size])
    return splitter.finish()


def _large_body(events: int, nested_kind: bool = False) -> bytes:
    """A bare array of ``events`` completions of ~1 KB; ``nested_kind``: each row holds objects
    whose ``kind`` looks like an event's start, so some cuts fall inside an event."""
    decoy = [{"kind": "started", "x": "y" * 200}] if nested_kind else []
    return orjson.dumps(
        [
            {"kind": "completed", "row": {"calls": decoy, "text": "z" * 900, "_ng_task_index": i}}
            for i in range(events)
        ]
    )


class TestEventSplitter:
    def test_counts_events_and_ignores_brackets_and_commas_in_strings(self) -> None:
        body = orjson.dumps([{"a": [1, {"b": "[[,{{{"}]}, "\\", ['"]],\\"'], [[]]])
        for size in (1, 2, 3, 7, len(body)):
            assert len(_fed(body, size)) == 4
            assert len(_fed(orjson.dumps({"events": orjson.loads(body)}), size)) == 4

    @settings(max_examples=150, deadline=None)
    @given(st.lists(_json_values, min_size=1, max_size=6), st.integers(1, 9))
    def test_count_and_depth_equal_the_structure_however_the_body_is_cut(
        self, events: list[Any], size: int
    ) -> None:
        body = orjson.dumps(events)
        depth = _depth(events)
        assert [orjson.loads(bytes(span)) for span in _fed(body, size, max_depth=depth)] == events
        with pytest.raises(BodyTooDeep):
            _fed(body, size, max_depth=depth - 1)

    @pytest.mark.parametrize("nested_kind", [False, True])
    def test_a_large_body_split_in_pieces_equals_one_split(self, nested_kind: bool) -> None:
        body = _large_body(3000, nested_kind)
        assert len(body) > 6 * 256 * 1024
        whole = [bytes(span) for span in msgspec.json.decode(body, type=list[msgspec.Raw])]
        for size in (65536, 100_003, len(body)):
            assert [bytes(span) for span in _fed(body, size)] == whole

    def test_refuses_past_the_cap_before_the_end(self) -> None:
        body = _large_body(3000)
        splitter = EventSplitter(1000, 1024)
        chunks = [body[start : start + 65536] for start in range(0, len(body), 65536)]
        fed = 0
        with pytest.raises(TooManyEvents, match="more than 1000 events"):
            for chunk in chunks:
                splitter.feed(chunk)
                fed += 1
        assert fed < len(chunks) - 2

    @pytest.mark.parametrize("max_depth", [8, 33, 1023, 1024])
    def test_depth_at_the_cap_with_a_value_inside_is_accepted(self, max_depth: int) -> None:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, max_depth + 200))  # (as the service sets it for its cap)
        try:
            for inner in (b"", b"1", b'"]"'):
                at_cap = b"[" * max_depth + inner + b"]" * max_depth
                assert len(_fed(at_cap, 7, max_depth=max_depth)) == 1
                with pytest.raises(BodyTooDeep):
                    _fed(b"[" + at_cap + b"]", 7, max_depth=max_depth)
        finally:
            sys.setrecursionlimit(limit)

    def test_nesting_past_the_decoders_recursion_limit_is_too_deep(self) -> None:
        body = b'[{"kind":"latency","x":' + b"[" * 600 + b"]" * 600 + b"}]"
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(500)  # (below the body's nesting, which the 1024 cap allows)
        try:
            with pytest.raises(BodyTooDeep, match="decoder's limit"):
                _fed(body, 4096)
        finally:
            sys.setrecursionlimit(limit)

    def test_an_error_in_the_last_piece_names_its_byte_in_the_body(self) -> None:
        body = _large_body(3000)
        broken = body[:-1] + b",x]"
        with pytest.raises(msgspec.DecodeError) as whole:
            msgspec.json.decode(broken, type=list[msgspec.Raw])
        with pytest.raises(msgspec.DecodeError) as pieces:
            _fed(broken, 65536)
        assert str(pieces.value) == str(whole.value)


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
