"""``health.json_vet.vet_event_rows``: an ingest body vetted, with each event's row found in the same pass.

The invariant, over seeded bodies (arrays of events and ``{"events": [...]}``, repeated
``"row"`` keys, ``"row"`` keys nested inside rows, elements that are not objects, escaped
keys, other envelope members, broken bodies): the answer is ``False`` exactly where
:func:`health.json_vet.vet` refuses; a span is the value msgspec keeps for the element's
``"row"`` (its last occurrence); the skeleton reads as the body with each event's ``"row"``
set to ``0``; ``True`` only for the shapes the spans do not cover.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from health import json_vet
from health.json_vet import native_vet, vet, vet_event_rows

needs_native = pytest.mark.skipif(native_vet is None, reason="health._json_vet is not built")

_DEPTH = 259


def _value(rng: random.Random, depth: int = 0) -> bytes:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.choice([b"1", b"-2.5e3", b"true", b"null", b"18446744073709551616"])
    if kind == 1:
        return rng.choice([b'"text"', b'"a\\"b\\\\"', b'"\\u00e9\\ud83d\\ude00"', b'"}]\\n"', b'"\\ud800"'])
    if kind == 2:
        return b"[]"
    if kind == 3:
        return b"{}"
    if kind == 4:
        return b"[" + b",".join(_value(rng, depth + 1) for _ in range(rng.randint(1, 3))) + b"]"
    return b"{" + b",".join(_member(rng, depth + 1) for _ in range(rng.randint(1, 3))) + b"}"


def _member(rng: random.Random, depth: int) -> bytes:
    key = rng.choice([b'"row"', b'"run_id"', b'"kind"', b'"x"', b'"r\\u006fw"'])
    return key + rng.choice([b":", b" : "]) + _value(rng, depth)


def _event(rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        return _value(rng, 2)  # not an object
    members = [_member(rng, 1) for _ in range(rng.randint(0, 4))]
    if rng.random() < 0.7:
        members.insert(rng.randrange(len(members) + 1), b'"row":' + _value(rng, 1))
    return b"{" + b",".join(members) + b"}"


def _body(rng: random.Random) -> bytes:
    events = b"[" + b", ".join(_event(rng) for _ in range(rng.randint(0, 5))) + b"]"
    shape = rng.randrange(6)
    if shape == 0:
        body = b'{"events":' + events + b"}"
    elif shape == 1:
        body = rng.choice([b'{"events":' + events + b',"x":1}', b'{"events":[],"events":' + events + b"}"])
    elif shape == 2:
        body = rng.choice([b'{"ev\\u0065nts":' + events + b"}", b'{"events":{}}', b"{}", b'"s"'])
    else:
        body = events
    if rng.random() < 0.15:  # a broken body
        data = bytearray(body)
        data[rng.randrange(len(data))] = rng.choice(b'"\\{}[],:x\x00\xff')
        body = bytes(data)
    return b" " + body if rng.random() < 0.1 else body


def _expected_skeleton(value: Any) -> Any:
    events = value["events"] if isinstance(value, dict) else value
    edited = [
        {**event, "row": 0} if isinstance(event, dict) and "row" in event else event for event in events
    ]
    return {"events": edited} if isinstance(value, dict) else edited


def _assert_rows(body: bytes) -> bool | None:
    found = vet_event_rows(body, _DEPTH)
    vetted = vet(body, _DEPTH)
    assert (found is not False) == vetted, body
    if isinstance(found, bool):
        return None if found else False
    skeleton, spans = found
    value = orjson.loads(body)
    events = value["events"] if isinstance(value, dict) else value
    assert isinstance(events, list) and len(spans) == len(events), body
    for event, (start, end) in zip(events, spans, strict=True):
        if isinstance(event, dict) and "row" in event:
            assert orjson.loads(body[start:end]) == event["row"], body
        else:
            assert (start, end) == (-1, -1), body
    assert orjson.loads(skeleton) == _expected_skeleton(value), body
    return True


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_seeded_bodies(seed: int) -> None:
    rng = random.Random(4000 + seed)
    answers = [_assert_rows(_body(rng)) for _ in range(500)]
    # every answer is reached, so the generator covers the cases
    assert answers.count(True) > 50 and answers.count(None) > 20 and answers.count(False) > 20, answers


@needs_native
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'[{"row":{"a":1},"k":2},{"k":1},3,{"row":[1],"row":"z"}]',
            (b'[{"row":0,"k":2},{"k":1},3,{"row":0,"row":0}]', [(8, 15), (-1, -1), (-1, -1), (50, 53)]),
        ),
        (b'{"events":[{"row":1}]}', (b'{"events":[{"row":0}]}', [(18, 19)])),
        (b" [ ] ", (b" [ ] ", [])),
        (b'[{"row":{"row":1}}]', (b'[{"row":0}]', [(8, 17)])),
        (b'{"events":[],"x":1}', True),
        (b'{"events":[],"events":[]}', True),
        (b"{}", True),
        (b'{"events":{}}', True),
        (b'[{"r\\u006fw":1}]', True),
        (b"1", True),
        (b"[1", False),
        (b'[{"row":1e999}]', False),
    ],
)
def test_shapes(body: bytes, expected: Any) -> None:
    assert vet_event_rows(body) == expected


def test_without_the_extension_it_is_the_vetter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_vet, "_native_event_rows", None)
    assert vet_event_rows(b'[{"row":1}]') is True
    assert vet_event_rows(b'[{"row":1}') is False
