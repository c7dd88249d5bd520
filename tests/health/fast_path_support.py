"""Shared machinery of the fast-path differential tests (``test_fast_path``, ``test_strict_schema``).

* the two paths a line can take through ``health.digest`` and :func:`assert_paths_agree`, the
  invariant under test: the fast path defers (``None``) or returns exactly the full path's digest;
* :data:`TEMPLATE`, a small valid record whose bytes have named splice points, so that any raw
  bytes (invalid JSON included) can be put into a value, or before/after the keys of an object;
* a raw-JSON tree encoder (:class:`RawJSON`, :class:`DupObject`) that writes invalid tokens and
  duplicate keys, which no JSON library will;
* :func:`mutate`, random structural edits of a record driven by a :class:`Chooser` (a seeded
  ``random.Random`` or a hypothesis draw);
* a small corpus of ``sidecar.demo.synthetic`` rows, failure rows and torn lines, faults included.
"""

from __future__ import annotations

import copy
import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson
from hypothesis import strategies as st

from health.compact import compact_digest
from health.contract import check_trajectory
from health.digest import (
    Location,
    _digest_everyday,
    _digest_form,
    _digest_parsed,
    digest_everyday_compact,
    digest_line,
    digest_line_compact,
)
from health.fast_path import read_everyday_record, read_stripped_line
from health.parse import parse_line
from health.rejection import RejectedRecord
from health.types import RolloutDigest
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_events

T = TypeVar("T")

LOCATION = Location("run/rollouts.jsonl", 0, 7, 3)
"""``(source_path, source_index, line_number, ordinal)`` of every line digested here."""

# --------------------------------------------------------------------------------------------
# The two paths


def full_path_digest(line: bytes, ignored: frozenset[str] = frozenset()) -> RolloutDigest:
    """The reference: orjson parse plus the pydantic contract (``health.digest._digest_parsed``)."""
    record, error = parse_line(line)
    walked = _digest_parsed(record, error, LOCATION, ignored, len(line), None)[0]
    return _digest_form(walked, LOCATION, ignored)


def fast_path_digest(line: bytes, ignored: frozenset[str] = frozenset()) -> RolloutDigest | None:
    """The fast path alone: its digest, or ``None`` where it defers (strict decode or identity)."""
    everyday = read_everyday_record(line.strip())
    return None if everyday is None else _digest_everyday(everyday, LOCATION, ignored)


def digest_line_at(line: bytes, ignored: frozenset[str] = frozenset()) -> RolloutDigest:
    """The public entry point, which tries the fast path first."""
    source_path, source_index, line_number, ordinal = LOCATION
    return digest_line(
        line,
        source_path=source_path,
        source_index=source_index,
        line_number=line_number,
        ordinal=ordinal,
        ignored_checks=ignored,
    )


def orjson_reads_an_object(line: bytes) -> bool:
    record, error = parse_line(line)
    return error is None and isinstance(record, dict)


def _shown(line: bytes) -> str:
    return repr(line if len(line) <= 400 else line[:200] + b"..." + line[-150:])


def assert_same_digest(got: RolloutDigest, want: RolloutDigest, line: bytes) -> None:
    """Equal, and equal in ``repr`` too: ``2 == 2.0`` and ``0.0 == -0.0``, but reports tell them apart."""
    assert got == want, f"digests differ for line {_shown(line)}"
    assert repr(got) == repr(want), f"digests differ in value types for line {_shown(line)}"


def assert_paths_agree(line: bytes, ignored: frozenset[str] = frozenset()) -> bool:
    """The invariant: the fast path defers or agrees. Returns whether it vouched for the line."""
    if read_everyday_record(line.strip()) is not None:
        assert orjson_reads_an_object(line), f"fast path accepted a line orjson rejects: {_shown(line)}"
    if isinstance(read_stripped_line(line.strip()), RejectedRecord):
        assert_contract_rejects(line)
    full = full_path_digest(line, ignored)
    fast = fast_path_digest(line, ignored)
    if fast is not None:
        assert_same_digest(fast, full, line)
    assert_same_digest(digest_line_at(line, ignored), full, line)
    assert_same_compact(line, full, ignored)
    return fast is not None


def assert_same_compact(line: bytes, full: RolloutDigest, ignored: frozenset[str] = frozenset()) -> None:
    """The compact entry points (which build no ``RolloutDigest``), on the line's bytes or on a
    view of them, give exactly the full path's digest as ``compact_digest`` packs it."""
    want = compact_digest(full)
    source_path, source_index, line_number, ordinal = LOCATION
    location = {
        "source_path": source_path,
        "source_index": source_index,
        "line_number": line_number,
        "ordinal": ordinal,
        "ignored_checks": ignored,
    }
    compact, _ = digest_line_compact(line, **location)
    assert compact == want, f"compact digests differ for line {_shown(line)}"
    assert repr(compact) == repr(want), f"compact digests differ in value types for line {_shown(line)}"
    in_place, _ = digest_line_compact(memoryview(line), **location)
    assert repr(in_place) == repr(want), f"compact digest of a view differs for line {_shown(line)}"
    everyday = digest_everyday_compact(line.strip(), **location)
    if everyday is not None:
        assert repr(everyday[0]) == repr(want), f"compact fast-path digest differs for line {_shown(line)}"


def assert_contract_rejects(line: bytes) -> None:
    """The full path's own verdict on a line the definite-rejection path refused: ValidationError."""
    record, error = parse_line(line)
    assert error is None and isinstance(record, dict), f"rejected a line orjson cannot read: {_shown(line)}"
    outcome = check_trajectory(record.get("ng_trajectory"))
    assert outcome == (None, "ValidationError"), f"the contract says {outcome[1]!r} for {_shown(line)}"


# --------------------------------------------------------------------------------------------
# A raw-JSON tree: orjson for ordinary values, spliced bytes for the rest


@dataclass(frozen=True, slots=True)
class RawJSON:
    """Bytes written verbatim in place of a value: invalid tokens, odd spacing, deep nesting."""

    data: bytes


try:
    from health._json_vet import TEXT_KEYS
except ImportError:  # not built: the vetter's copy keeps every text
    TEXT_KEYS = ()  # type: ignore[misc]


def without_texts(value: Any) -> Any:
    """``value`` (JSON values) with every string under one of the vetter's TEXT_KEYS, at any
    depth, as ``""``: a conversation as the fast path may decode it
    (:mod:`health.payload_spans`)."""
    if isinstance(value, dict):
        return {
            key: "" if key in TEXT_KEYS and isinstance(item, str) else without_texts(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [without_texts(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class DupObject:
    """An object written with these ``(key, value)`` pairs in order, duplicate keys allowed."""

    pairs: tuple[tuple[str, Any], ...]


def encode(value: Any) -> bytes:
    """Serialize a tree that may hold :class:`RawJSON` and :class:`DupObject` nodes."""
    if isinstance(value, RawJSON):
        return value.data
    if isinstance(value, DupObject):
        return b"{" + b",".join(orjson.dumps(key) + b":" + encode(item) for key, item in value.pairs) + b"}"
    if isinstance(value, dict):
        return b"{" + b",".join(orjson.dumps(key) + b":" + encode(item) for key, item in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(encode(item) for item in value) + b"]"
    if type(value) is int:  # any size: orjson writes 64-bit integers only
        return str(value).encode()
    return orjson.dumps(value)


def nested(depth: int, kind: str = "array", leaf: Any = 1) -> Any:
    """``leaf`` wrapped in ``depth`` arrays (``[[1]]``) or objects (``{"k":{"k":1}}``)."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "array" else {"k": value}
    return value


def deep_json(depth: int, kind: str = "array") -> bytes:
    """The JSON text of :func:`nested` (``leaf`` 1), written without recursion."""
    if kind == "array":
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"k":' * depth + b"1" + b"}" * depth


# --------------------------------------------------------------------------------------------
# The template record and its splice points

POLICY = {"type": "responses_api_models", "name": "policy"}
CONTENT_RESPONSE = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}]}

VALUE_DEFAULTS: dict[str, bytes] = {
    "skipped": b'"kept aside"',
    "text": b'"hello"',
    "question": b'"what is 2+2?"',
    "answer": b'"4."',
    "reasoning": b'"think"',
    "tool_output": b'"done"',
    "gap_detail": b'"call:c9"',
    "request": b'{"input":"hi"}',
    "response": orjson.dumps(CONTENT_RESPONSE),
    "length_response": orjson.dumps(CONTENT_RESPONSE),
}
"""Every value splice point and what the template holds there."""

OBJECT_SLOTS = (
    "top",
    "trajectory",
    "invocation",
    "ref",
    "turn",
    "call",
    "metadata",
    "model_ref",
    "tokens",
    "tool",
    "gap",
)
"""Objects whose first and last key positions are splice points for raw ``"key":value`` pairs."""


def _obj(slot: str, **fields: Any) -> dict[str, Any]:
    return {f"@@<{slot}@@": 0, **fields, f"@@>{slot}@@": 0}


def _placeholder(name: str) -> str:
    return f"@@{name}@@"


def _template_record() -> dict[str, Any]:
    """Healthy: two policy calls (one stopped for length, with content), a tool call, a benign gap."""
    p = _placeholder
    return _obj(
        "top",
        _ng_task_index=3,
        _ng_rollout_index=1,
        skipped=p("skipped"),
        response={"usage": {"input_tokens": 30, "output_tokens": 12}},
        ng_trajectory=_obj(
            "trajectory",
            schema_version="1.0",
            task_id="3",
            rollout_id="3-1",
            invocations=[
                _obj(
                    "invocation",
                    invocation_id="main",
                    status="completed",
                    duration_ms=10.5,
                    model_calls=[_obj("ref", model_call_id="c1"), {"model_call_id": "c2"}],
                    conversation=[
                        {"role": "user", "content": p("text")},
                        {
                            "type": "message",
                            "id": "m1",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": "4.", "annotations": []}],
                        },
                    ],
                )
            ],
            turns=[
                _obj(
                    "turn",
                    invocation_id="main",
                    task_id="3",
                    rollout_id="3-1",
                    turn_no=1,
                    timestamp=1.5,
                    question=p("question"),
                    answer=p("answer"),
                    reasoning_content=p("reasoning"),
                    resolved=True,
                    step_count=2,
                    model_calls=[
                        {"model_call_id": "c1", "model_ref": POLICY, "response_id": "r1"},
                        {"model_call_id": "c2"},
                    ],
                )
            ],
            model_calls=[
                _obj(
                    "call",
                    model_call_id="c1",
                    started_at=1.0,
                    completed_at=2.0,
                    duration_ms=1000.0,
                    request=p("request"),
                    response=p("response"),
                    response_metadata=_obj(
                        "metadata",
                        response_id="r1",
                        model_ref=_obj("model_ref", **POLICY),
                        model="m",
                        status_code=200,
                        finish_reason="stop",
                        latency_ttft_ms=5.0,
                    ),
                    token_stats=_obj("tokens", prompt_tokens=10, completion_tokens=5, total_tokens=15),
                ),
                {
                    "model_call_id": "c2",
                    "started_at": 2.5,
                    "completed_at": 3.0,
                    "request": {"input": "go on"},
                    "response": p("length_response"),
                    "response_metadata": {
                        "response_id": "r2",
                        "model_ref": POLICY,
                        "status_code": 200,
                        "finish_reason": "length",
                    },
                    "token_stats": {"prompt_tokens": 20, "completion_tokens": 7},
                },
            ],
            tool_calls=[
                _obj(
                    "tool",
                    invocation_id="main",
                    tool_call_id="t1",
                    tool_name="sh",
                    started_at=1.2,
                    completed_at=1.4,
                    status="completed",
                    output=p("tool_output"),
                )
            ],
            gaps=[_obj("gap", code="producer_note", detail=p("gap_detail"))],
        ),
    )


class Template:
    """The template's bytes with its splice points filled in."""

    def __init__(self, record: dict[str, Any]) -> None:
        self._text = orjson.dumps(record)
        for name in VALUE_DEFAULTS:
            assert self._text.count(orjson.dumps(_placeholder(name))) == 1, name
        for slot in OBJECT_SLOTS:
            assert self._text.count(f'"@@<{slot}@@":0,'.encode()) == 1, slot
            assert self._text.count(f',"@@>{slot}@@":0'.encode()) == 1, slot

    def render(
        self,
        values: Mapping[str, bytes] | None = None,
        head: Mapping[str, bytes] | None = None,
        tail: Mapping[str, bytes] | None = None,
    ) -> bytes:
        """``values``: raw bytes per value slot; ``head`` / ``tail``: raw ``"key":value`` pairs put
        before the first / after the last key of the named object (duplicates of its keys or not)."""
        values, head, tail = values or {}, head or {}, tail or {}
        unknown = (set(values) - set(VALUE_DEFAULTS)) | ((set(head) | set(tail)) - set(OBJECT_SLOTS))
        assert not unknown, unknown
        text = self._text
        for name, default in VALUE_DEFAULTS.items():
            text = text.replace(orjson.dumps(_placeholder(name)), values.get(name, default))
        for slot in OBJECT_SLOTS:
            first, last = head.get(slot), tail.get(slot)
            text = text.replace(f'"@@<{slot}@@":0,'.encode(), b"" if first is None else first + b",")
            text = text.replace(f',"@@>{slot}@@":0'.encode(), b"" if last is None else b"," + last)
        return text

    def with_pair(self, slot: str, where: str, pair: bytes) -> bytes:
        """The template with one raw ``"key":value`` pair at the ``"head"`` or ``"tail"`` of ``slot``."""
        assert where in ("head", "tail"), where
        return self.render(head={slot: pair}) if where == "head" else self.render(tail={slot: pair})


TEMPLATE = Template(_template_record())


def base_record() -> dict[str, Any]:
    """The template with its defaults, as a fresh dict (for mutation by path)."""
    record: dict[str, Any] = orjson.loads(TEMPLATE.render())
    return record


DELETE: Any = object()
"""Marks a key to remove in :func:`with_changes`."""

KeyPath = tuple[str | int, ...]


def with_changes(record: dict[str, Any], *changes: tuple[KeyPath, Any]) -> dict[str, Any]:
    """A deep copy of ``record`` with ``value`` set (or :data:`DELETE`-d, if there) at each path."""
    result = copy.deepcopy(record)
    for path, value in changes:
        parent: Any = result
        for key in path[:-1]:
            parent = parent[key]
        if value is DELETE:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(value)
    return result


# --------------------------------------------------------------------------------------------
# Random mutations


class Chooser(Protocol):
    """Where a mutation's random choices come from."""

    def index(self, size: int) -> int: ...

    def chance(self, probability: float) -> bool: ...


class SeededChooser:
    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def index(self, size: int) -> int:
        return self._rng.randrange(size)

    def chance(self, probability: float) -> bool:
        return self._rng.random() < probability


class DrawChooser:
    """Choices drawn from hypothesis (``st.data()``), so that a failing mutation shrinks."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def index(self, size: int) -> int:
        return self._data.draw(st.integers(0, size - 1))

    def chance(self, probability: float) -> bool:
        return self._data.draw(st.integers(0, 999)) < probability * 1000


def pick(chooser: Chooser, options: Sequence[T]) -> T:
    return options[chooser.index(len(options))]


EDGE_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    2.0,
    -0.0,
    1.5,
    1e-320,
    1e300,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    "",
    " ",
    "0",
    "1",
    "2",
    "1.5",
    "true",
    "null",
    "main",
    "c1",
    "length",
    "max_tokens",
    "stop",
    "1.0",
    "responses_api_models",
    "agent_invocation",
    "tool_call",
    "completed",
    "\u0000",
    "\U0001f600",
    [],
    {},
    [None],
    {"model_call_id": "x"},
    {"type": "responses_api_models", "name": "policy"},
    {"role": "user", "content": "hi"},
    RawJSON(b"NaN"),
    RawJSON(b"Infinity"),
    RawJSON(b"1e400"),
    RawJSON(b"-1e400"),
    RawJSON(b"1.8e308"),
    RawJSON(b"18446744073709551616"),
    RawJSON(b"-9223372036854775809"),
    RawJSON(b"1" * 400),
    RawJSON(b'"\\ud800"'),
    RawJSON(b'"\\udc00\\ud800"'),
    RawJSON(b'"\xff"'),
    RawJSON(b'"\xc0\xaf"'),
    RawJSON(b'"\xed\xa0\x80"'),
    RawJSON(b'"\x01"'),
    RawJSON(b" \n\t 7 \r "),
    RawJSON(b"\x0b7"),
    RawJSON(b"[1,]"),
    RawJSON(b"01"),
    RawJSON(b"tru"),
)
"""Values swapped in by :func:`mutate`; the ``RawJSON`` ones are invalid or odd JSON text."""

_TRAJECTORY_BIAS = 0.75


def _edge(chooser: Chooser) -> Any:
    """A fresh copy of an edge value (they are shared and mutations edit in place)."""
    return copy.deepcopy(pick(chooser, EDGE_VALUES))


def _retyped(chooser: Chooser, value: Any) -> Any:
    """The same information in another JSON type, as lax coercion would read it."""
    if isinstance(value, bool):
        return pick(chooser, [int(value), str(value).lower(), float(value)])
    if isinstance(value, int):
        return pick(chooser, [str(value), float(value), value != 0, -value, value + 1])
    if isinstance(value, float):
        return pick(chooser, [str(value), int(value) if value == int(value) else value, -value, None])
    if isinstance(value, str):
        return pick(chooser, [value + "x", value.upper(), [value], int(value) if value.isdigit() else None])
    if isinstance(value, list):
        return copy.deepcopy(
            pick(
                chooser,
                [value[:1], value + value[-1:], value[::-1], {str(i): v for i, v in enumerate(value)}],
            )
        )
    if isinstance(value, dict):
        return pick(
            chooser, [list(value.values()), {**value, "unexpected": 1}, dict(reversed(value.items()))]
        )
    return _edge(chooser)


def _walk(chooser: Chooser, root: dict[str, Any]) -> tuple[Any, str | int] | None:
    """A random ``(container, key)`` in ``root``, usually inside ``ng_trajectory``."""
    container: Any = root
    if isinstance(root.get("ng_trajectory"), dict | list) and chooser.chance(_TRAJECTORY_BIAS):
        container = root["ng_trajectory"]
        if not container:
            return root, "ng_trajectory"
    while True:
        keys: list[Any] = list(container) if isinstance(container, dict) else list(range(len(container)))
        if not keys:
            return None
        key = pick(chooser, keys)
        child = container[key]
        if isinstance(child, dict | list) and child and chooser.chance(0.7):
            container = child
            continue
        return container, key


def mutate(chooser: Chooser, row: dict[str, Any]) -> Any:
    """One random edit of ``row`` (modified in place, or a replacement tree returned)."""
    found = _walk(chooser, row)
    if found is None:
        return row
    container, key = found
    operation = chooser.index(6)
    if operation == 0:  # delete
        del container[key]
    elif operation == 1:  # swap in an edge value
        container[key] = _edge(chooser)
    elif operation == 2:  # retype
        container[key] = _retyped(chooser, container[key])
    elif operation == 3 and isinstance(container, dict):  # duplicate the key, first or last
        other = _edge(chooser) if chooser.chance(0.8) else copy.deepcopy(container[key])
        pairs = list(container.items())
        position = next(i for i, (name, _) in enumerate(pairs) if name == key)
        pairs.insert(position + chooser.index(2), (key, other))
        _replace(row, container, DupObject(tuple(pairs)))
    elif operation == 4 and isinstance(container, dict):  # an unknown key
        container[pick(chooser, ["extra", "kind", "type", "id", "model_calls", "_ng_task_index"]) + "_"] = (
            _edge(chooser)
        )
    elif operation == 5 and isinstance(container, list):  # repeat an element
        container.insert(chooser.index(len(container) + 1), copy.deepcopy(container[key]))
    else:
        container[key] = _edge(chooser)
    return row


def _replace(root: Any, target: Any, replacement: Any) -> bool:
    """Put ``replacement`` where the object ``target`` sits in ``root`` (by identity)."""
    items = root.items() if isinstance(root, dict) else enumerate(root) if isinstance(root, list) else ()
    for key, child in list(items):
        if child is target:
            root[key] = replacement
            return True
        if isinstance(child, dict | list) and _replace(child, target, replacement):
            return True
    return False


def mutated_line(chooser: Chooser, row: dict[str, Any], edits: int) -> bytes:
    tree: Any = copy.deepcopy(row)
    for _ in range(edits):
        if not isinstance(tree, dict):
            break
        tree = mutate(chooser, tree)
    return encode(tree)


# --------------------------------------------------------------------------------------------
# The synthetic corpus

SYNTHETIC_CONFIGS = (
    SyntheticConfig(
        num_tasks=40,
        repeats_per_task=2,
        model_calls_per_rollout=3,
        payload_bytes_per_call=192,
        subagent_probability=0.5,
        judge_call_probability=0.3,
        faults=FaultRates.mixed(1 / 16),
        broken_task_fraction=0.1,
        failure_rate=0.1,
    ),
    SyntheticConfig(
        num_tasks=10,
        repeats_per_task=2,
        model_calls_per_rollout=2,
        payload_bytes_per_call=96,
        turns=2,
        tool_call_probability=0.9,
    ),
)


@dataclass(frozen=True, slots=True)
class SyntheticLine:
    line: bytes
    row: dict[str, Any] | None
    fault: str | None
    kind: str


@functools.cache
def synthetic_corpus() -> tuple[SyntheticLine, ...]:
    """Every line of two small generated runs: results (faults included), failure rows, torn lines."""
    lines: list[SyntheticLine] = []
    for seed, config in enumerate(SYNTHETIC_CONFIGS, start=11):
        for event in generate_events(config, seed):
            if event.row is not None:
                lines.append(SyntheticLine(orjson.dumps(event.row), event.row, event.fault, event.kind))
            elif event.line is not None:
                lines.append(SyntheticLine(event.line.rstrip(b"\n"), None, event.fault, event.kind))
    return tuple(lines)


def corpus_rows() -> list[dict[str, Any]]:
    return [item.row for item in synthetic_corpus() if item.row is not None]


Mutation = Callable[[dict[str, Any]], dict[str, Any]]
