"""JSON bodies: the event count and depth checked as an ingest body arrives, and the
serializers every answer goes through (64-bit-safe; the report's chunked one)."""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

import orjson

from health.reduce import release_gradually

__all__ = [
    "BodyTooDeep",
    "EventCounter",
    "TooManyEvents",
    "dumps_json",
    "dumps_report",
    "line_text",
]

_STRING = re.compile(rb'"[^"]*"')
_PAIR_HEIGHT = 3  # a pair of a skeleton without strings holding at most two levels of pairs:
_PAIR = re.compile(rb"\{,*\}|\[,*\]")
for _ in range(_PAIR_HEIGHT - 1):
    _PAIR = re.compile(rb"\{(?:,|%s)*+\}|\[(?:,|%s)*+\]" % (_PAIR.pattern, _PAIR.pattern))
_ESCAPES = b"\\/bfnrtu"  # a backslash and every character JSON lets it escape but a quote
_NOT_ESCAPES_OR_SKELETON = bytes(b for b in range(256) if b not in b'"[]{},' + _ESCAPES)
_SLICE = 64 * 1024
_OPENERS = frozenset(b"[{")
_COMMA = ord(",")


class BodyTooDeep(ValueError):
    """The body nests deeper than the cap (found while reading it)."""


class TooManyEvents(ValueError):
    """The body holds more events than the cap (found while reading it)."""


class EventCounter:
    """Counts an ingest body's events and nesting depth chunk by chunk as it arrives, so a
    body past either cap is refused before it is read on; the chunk is reduced at C speed first."""

    def __init__(self, max_events: int, max_depth: int) -> None:
        self.max_events = max_events
        self.max_depth = max_depth
        self.events = 0
        self._depth = 0
        self._level = 0  # the depth of the events' list: 1 (array) or 2 (wrapped), 0 until seen
        self._in_string = False
        self._carry = b""  # an unpaired backslash at the end of the last chunk

    def feed(self, chunk: bytes) -> None:
        """Count ``chunk``; raises :class:`TooManyEvents` or :class:`BodyTooDeep`."""
        for start in range(0, len(chunk), _SLICE):  # (each C call short: the loop waits for none)
            self._feed(chunk[start : start + _SLICE] if len(chunk) > _SLICE else chunk)

    def _feed(self, chunk: bytes) -> None:
        # First everything but what escapes, strings and structure are made of goes: an escape's
        # backslash stays next to the character it escapes, so the escapes are dropped on a
        # quarter of the bytes.
        data = self._carry + chunk.translate(None, _NOT_ESCAPES_OR_SKELETON)
        self._carry = b""
        if b"\\\\" in data:
            data = data.replace(b"\\\\", b"")
        if data.endswith(b"\\"):
            data, self._carry = data[:-1], b"\\"
        if b'\\"' in data:
            data = data.replace(b'\\"', b"")
        skeleton = data.translate(None, _ESCAPES)
        if self._in_string:
            skeleton = b'"' + skeleton
        # Two adjacent quotes hold nothing structural between them (an empty string, or one
        # string's end and the next's start): dropping them keeps every other quote's role, and
        # leaves the regex only the few strings that hold brackets or commas.
        skeleton = skeleton.replace(b'""', b"")
        self._in_string = skeleton.count(b'"') % 2 == 1
        if self._in_string:
            skeleton = skeleton[: skeleton.rfind(b'"')]
        self._walk(_STRING.sub(b"", skeleton) if b'"' in skeleton else skeleton)

    def _walk(self, skeleton: bytes) -> None:
        if self._level:  # (the events' list is open: any pair this chunk closes lies inside it)
            reduced, height = skeleton, 0
            while True:
                shorter = _PAIR.sub(b"", reduced)
                if len(shorter) == len(reduced):
                    break
                reduced, height = shorter, height + _PAIR_HEIGHT
            if self._walk_reduced(reduced, height):
                return
        self._walk_exact(skeleton)

    def _walk_reduced(self, reduced: bytes, height: int) -> bool:
        """Count from ``reduced`` (pairs nested at most ``height`` deep removed) if that is exact;
        else change nothing and say so (the exact walk then takes the chunk)."""
        depth, level, deepest, commas = self._depth, self._level, self._depth, 0
        for byte in reduced:
            if byte == _COMMA:
                commas += depth == level
            elif byte in _OPENERS:
                depth += 1
                deepest = max(deepest, depth)
            else:
                depth -= 1
                if depth < level:  # the list closed: what follows it is the exact walk's
                    return False
        if deepest + height > self.max_depth:  # (a bound: the exact walk decides)
            return False
        self._depth = depth
        self._count(commas)
        return True

    def _count(self, commas: int) -> None:
        self.events += commas + (self.events == 0 and self._level > 0)  # (an empty list counts one)
        if self.events > self.max_events:
            raise TooManyEvents(f"more than {self.max_events} events in one request")

    def _walk_exact(self, skeleton: bytes) -> None:
        depth, level, commas = self._depth, self._level, 0
        for byte in skeleton:
            if byte == _COMMA:
                commas += depth == level
            elif byte in _OPENERS:
                depth += 1
                if depth > self.max_depth:
                    raise BodyTooDeep(f"JSON nesting exceeds {self.max_depth} levels")
                if not level:
                    level = 1 if byte == ord("[") else 2
            else:
                depth -= 1
        self._depth, self._level = depth, level
        self._count(commas)


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
    """``body`` as compact JSON; integers past 64 bits (which orjson refuses) via the stdlib."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(_finite_only(body), separators=(",", ":"), ensure_ascii=False).encode()


_TASKS_PER_CHUNK = 2048


def dumps_report(report: dict[str, Any]) -> bytes:
    """``dumps_json(report)`` byte for byte, its per-task map written in chunks and freed as it
    goes, so the event loop gets the GIL back between steps."""
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
    """A raw line as an event's ``line`` string: its UTF-8 text, or (not UTF-8) the text with
    replacement characters behind a leading U+FFFD, so it stays unreadable as the batch reads it."""
    try:
        return str(line, "utf-8")
    except UnicodeDecodeError:
        return "\ufffd" + str(line, "utf-8", "replace")
