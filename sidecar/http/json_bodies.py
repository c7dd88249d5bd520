"""JSON bodies: an ingest body split into its events (counted and depth-checked) as it arrives,
and the serializers every answer goes through (64-bit-safe; the report's chunked one)."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from typing import Any

import msgspec
import orjson

from health.json_vet import may_nest_deeper
from health.process_tuning import yield_point
from health.reduce import release_gradually
from sidecar.ingest.events import EVENT_KINDS, ITEM_SPANS, PIECE_BYTES

__all__ = [
    "BodyTooDeep",
    "EventSplitter",
    "TooManyEvents",
    "dumps_json",
    "dumps_report",
    "line_text",
]

_EVENT_START = b',{"kind":"'
_KIND_NAMES = frozenset(kind.encode() for kind in EVENT_KINDS)
_MAX_KIND_CHARS = 40  # how far past ``,{"kind":"`` a kind's closing quote is looked for
_MAX_MISSES = 8
"""Cuts that fell inside an event before cutting stops (the rest is split as the last piece)."""
_BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"')
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_OPENERS = frozenset(b"[{")


class _Wrapped(msgspec.Struct, forbid_unknown_fields=True):
    events: list[msgspec.Raw]


_WHOLE = msgspec.json.Decoder(list[msgspec.Raw] | _Wrapped)


class BodyTooDeep(ValueError):
    """The body nests deeper than the cap, or than msgspec's recursion limit (~1,000 levels)."""


class TooManyEvents(ValueError):
    """The body holds more events than the cap (found while reading it)."""


def _cut_after(body: bytearray, at: int) -> int:
    """Where an event of the service's kinds likely starts at or past ``at`` (its comma), or -1."""
    while (cut := body.find(_EVENT_START, at)) >= 0:
        begin = cut + len(_EVENT_START)
        if bytes(body[begin : body.find(b'"', begin, begin + _MAX_KIND_CHARS)]) in _KIND_NAMES:
            return cut
        at = cut + 1
    return -1


def _too_deep(data: bytes, max_depth: int) -> bool:
    """Does JSON ``data`` nest more than ``max_depth`` containers? simdjson clears almost every
    document at C speed; one it cannot clear is counted exactly."""
    return may_nest_deeper(data, max_depth) and _container_depth(data) > max_depth


def _container_depth(data: bytes) -> int:
    """How deep containers nest in valid JSON ``data`` (``[]`` is 1 deep, ``[1]`` too)."""
    depth = deepest = 0
    for byte in _STRING.sub(b"", data).translate(None, _NOT_BRACKETS):
        if byte in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class EventSplitter:
    """An ingest body split into its events' spans as it arrives, building none of the events.

    A bare array is cut a piece at a time (before a ``,{"kind":"`` that splits cleanly), so its
    events are counted and its depth checked as it comes, a body past either cap is refused
    before it is read on, and every C call is short (the loop gets the interpreter lock back
    between them). What is left at the end is the last piece; the ``{"events": [...]}`` form is
    split whole. msgspec's errors (not JSON, not a list) are the caller's to word."""

    def __init__(self, max_events: int, max_depth: int) -> None:
        self.max_events = max_events
        self.max_depth = max_depth
        self.spans: list[msgspec.Raw] = []
        self._tail = bytearray()  # the body's bytes not split yet
        self._read = 0  # body bytes before the tail (0: the tail opens with the array's "[")
        self._search = PIECE_BYTES  # where in the tail the next cut is looked for
        self._bare: bool | None = None  # the body is a bare array (None until its first byte)
        self._misses = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next ``chunk``; raises :class:`TooManyEvents` or :class:`BodyTooDeep`."""
        self._tail += chunk
        if self._bare is None and self._tail:
            self._bare = self._tail[:1] == b"["
        if self._bare:
            self._split_pieces()

    def finish(self) -> list[msgspec.Raw]:
        """Every event's span, once the whole body was fed."""
        if not self._bare:
            body = bytes(self._tail)
            try:
                decoded = self._decode(_WHOLE, body)
            except msgspec.ValidationError:  # (valid JSON of another shape may still be too deep)
                self._check_depth(body)
                raise
            self._check_depth(body)
            self._add(decoded.events if isinstance(decoded, _Wrapped) else decoded)
            return self.spans
        first = 0 if self._read else 1
        with memoryview(self._tail) as view:
            piece = b"".join((b"[", view[first:]))
        try:
            spans = self._decode(ITEM_SPANS, piece)
        except msgspec.DecodeError as exc:  # its offset, as a byte of the whole body
            shift = self._read + first - 1
            message = _BYTE_OFFSET.sub(lambda found: f"(byte {int(found[1]) + shift})", str(exc))
            raise msgspec.DecodeError(message) from None
        self._check_depth(piece)
        self._add(spans)
        return self.spans

    def _split_pieces(self) -> None:
        tail = self._tail
        begin = 0 if self._read else 1
        cut_before = begin
        while len(tail) - begin > 2 * PIECE_BYTES and self._misses <= _MAX_MISSES:
            cut = _cut_after(tail, self._search)
            if cut < 0:  # (the next cut may lie in bytes not read yet: look there next time)
                self._search = max(self._search, len(tail) - len(_EVENT_START) - _MAX_KIND_CHARS)
                break
            with memoryview(tail) as view:
                piece = b"".join((b"[", view[begin:cut], b"]"))
            try:
                spans = self._decode(ITEM_SPANS, piece)
            except msgspec.DecodeError:  # that comma was inside an event (or the body is broken)
                self._misses += 1
                self._search = cut + 1
                continue
            self._check_depth(piece)
            self._add(spans)
            begin = cut + 1
            self._search = begin + PIECE_BYTES
        if begin != cut_before:  # (drop what was split)
            self._read += begin
            self._search -= begin
            self._tail = tail[begin:]

    @staticmethod
    def _decode(decoder: msgspec.json.Decoder[Any], data: bytes) -> Any:
        try:
            return decoder.decode(data)
        except RecursionError:
            limit = sys.getrecursionlimit()
            raise BodyTooDeep(f"JSON nesting exceeds the decoder's limit of about {limit} levels") from None

    def _add(self, spans: list[msgspec.Raw]) -> None:
        self.spans += spans
        if len(self.spans) > self.max_events:
            raise TooManyEvents(f"more than {self.max_events} events in one request")

    def _check_depth(self, data: bytes) -> None:
        if _too_deep(data, self.max_depth):
            raise BodyTooDeep(f"JSON nesting exceeds {self.max_depth} levels")


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
        parts = []
        for _ in range(0, len(tasks), _TASKS_PER_CHUNK):
            parts.append(orjson.dumps(dict(itertools.islice(items, _TASKS_PER_CHUNK)))[1:-1])
            yield_point()
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
