"""JSON bodies: the nesting-depth check run before parsing, and the serializers every answer
goes through (64-bit-safe, and the report's chunked one that keeps the event loop responsive).

No HTTP here: the trackers' export writes reports with :func:`dumps_report` too.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

import orjson

from health.reduce import release_gradually

__all__ = [
    "dumps_json",
    "dumps_report",
    "json_depth",
    "line_text",
    "too_deep",
]

_STRING = re.compile(rb'"[^"]*"')
_NOT_SKELETON = bytes(b for b in range(256) if b not in b'"[]{}')
_OPENERS = frozenset(b"[{")


def json_depth(data: bytes | bytearray, limit: int | None = None) -> int:
    """Nesting depth of a JSON text, brackets inside strings ignored; stops once past ``limit``.

    Runs mostly in C: escaped backslashes and quotes are dropped, everything but quotes and
    brackets deleted, strings removed; only the remaining brackets are walked in Python.
    """
    if b"\\" in data:  # (each replace copies the whole text, so only when there is an escape)
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = data.translate(None, _NOT_SKELETON)
    depth = deepest = 0
    for byte in _STRING.sub(b"", skeleton):
        if byte in _OPENERS:
            depth += 1
            if depth > deepest:
                deepest = depth
                if limit is not None and deepest > limit:
                    return deepest
        else:
            depth -= 1
    return deepest


def too_deep(data: bytes | bytearray, limit: int) -> bool:
    """True if ``data`` nests deeper than ``limit``; free when it has too few brackets to do so."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return json_depth(data, limit) > limit


def _finite_only(value: Any) -> Any:
    """``value`` with every non-finite float as ``None`` (what orjson writes for them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_only(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_only(item) for item in value]
    return value


def dumps_json(body: Any) -> bytes:
    """``body`` as compact JSON; integers past 64 bits (exact token sums) as plain digits.

    orjson refuses such integers, so those bodies go through the standard library instead.
    """
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(_finite_only(body), separators=(",", ":"), ensure_ascii=False).encode()


_TASKS_PER_CHUNK = 2048


def dumps_report(report: dict[str, Any]) -> bytes:
    """``dumps_json(report)`` byte for byte, for a freshly built report, whose per-task map it
    then empties.

    One ``orjson.dumps`` over 100k tasks holds the interpreter lock for ~15 ms, and freeing
    them at once as long, so the map is written in chunks spliced in as a fragment, then freed
    entry by entry: the event loop gets the lock back between steps.
    """
    summary = report.get("quality_summary")
    tasks = summary.get("tasks") if isinstance(summary, dict) else None
    if not isinstance(tasks, dict) or len(tasks) <= _TASKS_PER_CHUNK:
        return dumps_json(report)
    assert isinstance(summary, dict)
    try:
        items = iter(tasks.items())
        parts = [
            orjson.dumps(dict(itertools.islice(items, _TASKS_PER_CHUNK)))[1:-1]
            for _ in range(0, len(tasks), _TASKS_PER_CHUNK)
        ]
        spliced = orjson.Fragment(b"{" + b",".join(parts) + b"}")
        del parts
        try:
            return orjson.dumps({**report, "quality_summary": {**summary, "tasks": spliced}})
        except orjson.JSONEncodeError:  # an integer past 64 bits elsewhere in the report
            return dumps_json(report)
    finally:
        release_gradually(tasks)


def line_text(line: bytes | bytearray | memoryview) -> str:
    """A raw line as the ``line`` string of an event: its UTF-8 text, or (not UTF-8) the text with
    replacement characters behind a leading U+FFFD, so it stays unreadable as the batch check
    reads it."""
    try:
        return str(line, "utf-8")
    except UnicodeDecodeError:
        return "\ufffd" + str(line, "utf-8", "replace")
