"""Report rendering (docs/report.md): row bytes, summary bytes, sort keys, file writing."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from health.compact import CompactDigest, compact_digest
from health.report import (
    RowRenderer,
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


def _constructed(**overrides: object) -> CompactDigest:
    """A packed digest whose fields skip validation, so indices can be any value (``True``, ``1.5``)."""
    fields: dict[str, Any] = {
        "task_index": 0,
        "rollout_index": 0,
        "stage_index": None,
        "rollout_id": "r",
        "verdict": "healthy",
        "findings": [],
        "unobserved": [],
        "capture_observed": True,
    }
    fields.update(overrides)
    return compact_digest(RolloutDigest.model_construct(**fields))


class TestRenderRows:
    INDICES: tuple[object, ...] = (0, 7, -3, 2**64, 10**30, "a", 'é\n"', "", True, 1.5)
    STAGES: tuple[object, ...] = (None, 0, 1, "1", True, "s")

    def test_every_row_is_render_row_whatever_the_values(self) -> None:
        hollow = Finding(check="agent_turn_hollow", subject={}, locator={"turn": 1}, detail={"n": 10**30})
        digests = [
            _constructed(
                task_index=task,
                rollout_index=rollout,
                stage_index=stage,
                rollout_id=f"id-{n}-\u2028",
                verdict="unhealthy" if findings else ("healthy", "unobserved")[n % 2],
                findings=findings,
                unobserved=unobserved,
                ordinal=n,
            )
            for n, (task, rollout, stage, findings, unobserved) in enumerate(
                itertools.product(
                    self.INDICES,
                    self.INDICES[:4],
                    self.STAGES,
                    ([], [hollow]),
                    (
                        [],
                        ["agent_turn_hollow", "model_call_failed"],
                        ["model_call_failed", "agent_turn_hollow"],
                    ),
                )
            )
        ]
        random.Random(5).shuffle(digests)

        def duplicates(digest: CompactDigest) -> int:
            return digest.ordinal % 4

        expected = [render_row(digest, duplicates(digest)) for digest in digests]
        assert list(RowRenderer().rows(digests, duplicates)) == expected
        # None: no digest is a duplicate.
        assert list(RowRenderer().rows(digests, None)) == [render_row(digest) for digest in digests]
        assert b'"stage_index":true}' in b"".join(expected)
        assert b'"_ng_task_index":1.5,' in b"".join(expected)

    def test_a_string_orjson_refuses_fails_as_render_row_fails(self) -> None:
        digest = _constructed(rollout_id="\ud800")
        with pytest.raises(UnicodeEncodeError):
            render_row(digest)
        with pytest.raises(UnicodeEncodeError):
            list(RowRenderer().rows([digest], lambda _: 0))
        with pytest.raises(UnicodeEncodeError):
            list(RowRenderer().rows([digest], None))


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

    def test_row_key_orders_like_the_nested_parts(self) -> None:
        values: list[object] = [0, 3, 10, -1, "3", "10", "a", None]
        rng = random.Random(3)
        digests = [
            _constructed(
                task_index=rng.choice(values[:-1]),
                rollout_index=rng.choice(values[:-1]),
                stage_index=rng.choice(values),
                ordinal=n,
            )
            for n in range(400)
        ]

        def nested(digest: CompactDigest) -> tuple[object, ...]:
            return (
                index_sort_part(digest.task_index),
                index_sort_part(digest.rollout_index),
                index_sort_part(digest.stage_index),
                digest.ordinal,
            )

        assert sorted(digests, key=row_sort_key) == sorted(digests, key=nested)

    def test_task_order_is_textual_with_integers_first(self) -> None:
        assert sorted([2, "a", 10, 1, "10"], key=task_sort_key) == [1, 10, 2, "10", "a"]


class TestSummaryBytes:
    def test_indent_two_no_trailing_newline_empty_containers_inline(self) -> None:
        data = render_summary({"run": {"ignored_checks": [], "x": {}}, "tasks": {"é": 1}})
        assert (
            data == b'{\n  "run": {\n    "ignored_checks": [],\n    "x": {}\n  },\n'
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
