"""Report writers (spec §12-§14): exact bytes of ``quality_summary.json`` and ``rollout_verdicts.jsonl``.

Pure rendering: the reducer decides what goes in, these functions decide how it looks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from .compact import VERDICTS, CompactDigest, dumps_compact, unobserved_ids
from .types import TaskIndex

__all__ = [
    "SUMMARY_FILE",
    "VERDICTS_FILE",
    "index_sort_part",
    "render_row",
    "render_summary",
    "row_sort_key",
    "task_sort_key",
    "write_reports",
]

SUMMARY_FILE = "quality_summary.json"
VERDICTS_FILE = "rollout_verdicts.jsonl"


def index_sort_part(value: TaskIndex | None) -> tuple[int, Any]:
    """``(0, v)`` for integers (numeric order), ``(1, str(v))`` for anything else, ``None`` included."""
    if type(value) is int:
        return (0, value)
    return (1, str(value))


def row_sort_key(digest: CompactDigest) -> tuple[tuple[int, Any], tuple[int, Any], tuple[int, Any], int]:
    """Row order (spec §13): task, rollout, stage, then input order."""
    return (
        index_sort_part(digest.task_index),
        index_sort_part(digest.rollout_index),
        index_sort_part(digest.stage_index),
        digest.ordinal,
    )


def task_sort_key(task_index: TaskIndex) -> tuple[bool, str]:
    """Order of the ``tasks`` map (spec §12): integers first, both kinds compared as strings."""
    return (isinstance(task_index, str), str(task_index))


def _findings_json(digest: CompactDigest, duplicate_count: int) -> bytes:
    if duplicate_count < 2:
        return digest.findings
    extra = b'{"check":"rollout_duplicate_identity","detail":{"duplicate_count":%d}}' % duplicate_count
    if digest.findings == b"[]":
        return b"[" + extra + b"]"
    return digest.findings[:-1] + b"," + extra + b"]"


def render_row(digest: CompactDigest, duplicate_count: int = 0) -> bytes:
    """One ``rollout_verdicts.jsonl`` line, newline included; a duplicate turns the row unhealthy."""
    findings = _findings_json(digest, duplicate_count)
    verdict = "unhealthy" if duplicate_count >= 2 else VERDICTS[digest.verdict]
    row: dict[str, Any] = {
        "_ng_task_index": digest.task_index,
        "_ng_rollout_index": digest.rollout_index,
        "rollout_id": digest.rollout_id,
        "verdict": verdict,
        "findings": orjson.Fragment(findings),
        "unobserved": unobserved_ids(digest),
    }
    if digest.stage_index is not None:
        row["stage_index"] = digest.stage_index
    try:
        return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        parts = [
            b'{"_ng_task_index":' + dumps_compact(digest.task_index),
            b'"_ng_rollout_index":' + dumps_compact(digest.rollout_index),
            b'"rollout_id":' + dumps_compact(digest.rollout_id),
            b'"verdict":' + dumps_compact(verdict),
            b'"findings":' + findings,
            b'"unobserved":' + dumps_compact(list(unobserved_ids(digest))),
        ]
        if digest.stage_index is not None:
            parts.append(b'"stage_index":' + dumps_compact(digest.stage_index))
        return b",".join(parts) + b"}\n"


def render_summary(summary: dict[str, Any]) -> bytes:
    """``quality_summary.json``: two-space indent, insertion order, no trailing newline."""
    try:
        return orjson.dumps(summary, option=orjson.OPT_INDENT_2)
    except TypeError:
        return json.dumps(summary, indent=2, ensure_ascii=False).encode("utf-8")


def write_reports(output_dir: Path, summary: bytes, rows: Iterable[bytes]) -> tuple[Path, Path]:
    """Create ``output_dir`` and write the summary, then the verdict rows (spec §14)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    summary_path = output_dir / SUMMARY_FILE
    verdicts_path = output_dir / VERDICTS_FILE
    summary_path.write_bytes(summary)
    with open(verdicts_path, "wb") as handle:
        batch: list[bytes] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= 4096:
                handle.write(b"".join(batch))
                batch.clear()
        handle.write(b"".join(batch))
    return summary_path, verdicts_path
