"""Report rendering (spec §12-§14): row bytes, summary bytes, sort keys, file writing."""

from __future__ import annotations

from pathlib import Path

import orjson

from health.compact import compact_digest
from health.report import (
    index_sort_part,
    render_row,
    render_summary,
    row_sort_key,
    task_sort_key,
    write_reports,
)
from health.types import Finding, RolloutDigest


def _digest(**overrides: object) -> RolloutDigest:
    fields: dict[str, object] = {
        "task_index": 0,
        "rollout_index": 0,
        "rollout_id": "r",
        "verdict": "healthy",
        "findings": [],
        "unobserved": [],
        "capture_observed": True,
    }
    fields.update(overrides)
    return RolloutDigest.model_validate(fields)


class TestRows:
    def test_key_order_stage_last_and_only_when_set(self) -> None:
        assert render_row(compact_digest(_digest())) == (
            b'{"_ng_task_index":0,"_ng_rollout_index":0,"rollout_id":"r","verdict":"healthy",'
            b'"findings":[],"unobserved":[]}\n'
        )
        assert render_row(compact_digest(_digest(stage_index="s"))).endswith(b',"stage_index":"s"}\n')

    def test_finding_objects_omit_subject_and_missing_locator(self) -> None:
        finding = Finding(
            check="record_unreadable",
            subject={"_ng_task_index": 0, "_ng_rollout_index": 0},
            detail={"reason": "canonical trajectory is unreadable", "error": None},
        )
        row = render_row(compact_digest(_digest(findings=[finding], verdict="unhealthy")))
        assert b'"findings":[{"check":"record_unreadable","detail":{"reason":' in row
        assert b'"error":null}}]' in row

    def test_escaping_follows_orjson(self) -> None:
        row = render_row(compact_digest(_digest(rollout_id='a"\\\n\x01/<>&\x7f\u2028é')))
        assert b'"rollout_id":"a\\"\\\\\\n\\u0001/<>&\x7f\xe2\x80\xa8\xc3\xa9"' in row

    def test_duplicate_finding_is_appended_and_turns_row_unhealthy(self) -> None:
        hollow = Finding(check="agent_turn_hollow", subject={}, locator={"turn": 2}, detail={"reason": "x"})
        row = orjson.loads(render_row(compact_digest(_digest(findings=[hollow], verdict="unhealthy")), 3))
        assert row["findings"][-1] == {
            "check": "rollout_duplicate_identity",
            "detail": {"duplicate_count": 3},
        }
        assert row["findings"][0]["locator"] == {"turn": 2}
        healthy = orjson.loads(render_row(compact_digest(_digest()), 2))
        assert healthy["verdict"] == "unhealthy"

    def test_integers_beyond_64_bits_still_render(self) -> None:
        failed = Finding(
            check="model_call_failed", subject={}, locator={"call_id": "c"}, detail={"status": 10**30}
        )
        row = render_row(compact_digest(_digest(findings=[failed], verdict="unhealthy")))
        assert b'"detail":{"status":1000000000000000000000000000000}' in row


class TestOrdering:
    def test_index_parts(self) -> None:
        assert sorted([10, "10", 2, "b", "1"], key=index_sort_part) == [2, 10, "1", "10", "b"]
        assert index_sort_part(None) == (1, "None")

    def test_rows_sort_by_task_rollout_stage_then_input(self) -> None:
        digests = [
            compact_digest(_digest(task_index=1, stage_index=None, ordinal=0)),
            compact_digest(_digest(task_index=1, stage_index=5, ordinal=1)),
            compact_digest(_digest(task_index=1, stage_index="A", ordinal=2)),
            compact_digest(_digest(task_index="1", ordinal=3)),
            compact_digest(_digest(task_index=1, stage_index=None, ordinal=4)),
        ]
        ordered = [d.ordinal for d in sorted(digests, key=row_sort_key)]
        assert ordered == [1, 2, 0, 4, 3]

    def test_task_order_is_textual_with_integers_first(self) -> None:
        assert sorted([2, "a", 10, 1, "10"], key=task_sort_key) == [1, 10, 2, "10", "a"]


class TestSummaryBytes:
    def test_indent_two_no_trailing_newline_empty_containers_inline(self) -> None:
        data = render_summary({"run": {"ignored_checks": [], "x": {}}, "tasks": {"é": 1}})
        assert (
            data
            == b'{\n  "run": {\n    "ignored_checks": [],\n    "x": {}\n  },\n'
            b'  "tasks": {\n    "\xc3\xa9": 1\n  }\n}'
        )

    def test_huge_integers_fall_back_to_the_same_layout(self) -> None:
        assert (
            render_summary({"a": [10**30], "b": {}})
            == b'{\n  "a": [\n    1000000000000000000000000000000\n  ],\n  "b": {}\n}'
        )


def test_write_reports_creates_directories_and_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    summary_path, verdicts_path = write_reports(target, b"{}", iter([b"x\n", b"y\n"]))
    assert (summary_path.name, verdicts_path.name) == ("quality_summary.json", "rollout_verdicts.jsonl")
    assert verdicts_path.read_bytes() == b"x\ny\n"
    write_reports(target, b"{}", iter([]))
    assert verdicts_path.read_bytes() == b""
