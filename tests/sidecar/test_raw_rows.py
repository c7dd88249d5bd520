"""Rows kept as their bytes: the raw path agrees with the full path wherever it is taken."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from health.json_vet import vet
from sidecar.http.app import create_app
from sidecar.http.errors import RequestError
from sidecar.http.ingest_handlers import IngestHandlers
from sidecar.http.json_bodies import json_depth
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings
from sidecar.ingest import raw_rows
from sidecar.ingest.engines import default_engines
from sidecar.ingest.events import Completed, EventBatch, idempotency_key
from sidecar.ingest.facts import derive_fact
from sidecar.ingest.raw_rows import (
    SHALLOW_ROW_DEPTH,
    RawRow,
    decode_request,
    raw_line,
    row_spans,
    vetted_json,
)

from .service_support import generate_run

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
_json_values = st.recursive(
    _scalars | st.text(alphabet='[]{}"\\ab\n\u00e9'),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='[]{"\\x'), inner, max_size=3)
    ),
    max_leaves=20,
)


class TestVettedJson:
    @settings(max_examples=200, deadline=None)
    @given(_json_values, st.integers(1, 12))
    def test_vetted_only_within_the_depth(self, value: Any, limit: int) -> None:
        """Never past the limit; short of it always (at it, the exact check decides). Only an
        array or object is vetted (a body is one)."""
        data = orjson.dumps([value])
        vetted = vetted_json(data, limit)
        assert not vetted or json_depth(data) <= limit
        assert vetted or json_depth(data) >= limit

    @pytest.mark.parametrize(
        "data",
        [
            b"[1,",  # not JSON
            b"\xef\xbb\xbf[]",  # a BOM
            b"[NaN]",
            b"[123456789012345678901234567890]",  # an integer orjson reads as a float
            b'["\xff"]',  # not UTF-8
            b'["\\ud800"]',  # a lone surrogate
            b"[1e400]",
        ],
    )
    def test_anything_orjson_might_read_otherwise_is_not_vetted(self, data: bytes) -> None:
        assert not vetted_json(data)
        assert decode_request(data, 1024) is None


def _full(body: bytes) -> list[Any]:
    parsed = orjson.loads(body)
    return EventBatch.validate_python(parsed["events"] if isinstance(parsed, dict) else parsed)


def _plain(event: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = {name: getattr(event, name) for name in type(event).model_fields}
    if isinstance(dumped.get("row"), RawRow):
        dumped["row"] = dumped["row"].parsed()
    return dumped


class TestDecodeRequest:
    def test_every_kind_validates_to_the_same_events(self) -> None:
        run = generate_run(num_tasks=6, repeats=3, fault_rate=0.05, failure_rate=0.2, drained_fraction=0.1)
        events = [{"kind": "run_started", "plan": run.plan, "source_path": "x.jsonl"}, *run.events]
        events += [
            {"kind": "started", "task_index": 1, "attempt": 2},
            {"kind": "latency", "op": "record", "seconds": 1.5, "source": "t", "seq": 3},
            {"kind": "completed", "line": '{"_ng_task_index": 1}', "line_number": 4},
            {"kind": "completed", "row": None, "line": "{}"},
            {"kind": "run_ended", "ended_at": 5.0},
        ]
        for body in (orjson.dumps(events), orjson.dumps({"events": events})):
            decoded = decode_request(body, 1024)
            assert decoded is not None
            raw = EventBatch.validate_python(decoded)
            assert [_plain(event) for event in raw] == [_plain(event) for event in _full(body)]
            rows = [event.row for event in raw if isinstance(event, Completed) and event.row is not None]
            assert rows and all(isinstance(row, RawRow) and row.shallow for row in rows)

    @pytest.mark.parametrize(
        "body",
        [
            b'[{"kind": "completed", "row": {}, "colour": 1}]',  # a key the models forbid: they word it
            b'{"events": [], "more": 1}',
            b'{"events": 5}',
            b'[{"kind": "completed", "row": {"a": 123456789012345678901234567890}}]',
        ],
    )
    def test_bodies_the_raw_path_cannot_vouch_for_take_the_full_path(self, body: bytes) -> None:
        assert decode_request(body, 1024) is None

    def test_a_deep_body_within_the_cap_keeps_its_rows_but_not_as_shallow(self) -> None:
        levels = SHALLOW_ROW_DEPTH + 3
        deep = b'{"_ng_task_index":0,"x":' * levels + b"1" + b"}" * levels
        body = b'[{"kind":"completed","row":' + deep + b"}]"
        decoded = decode_request(body, 1024)
        assert decoded is not None
        row = decoded[0]["row"]
        assert isinstance(row, RawRow) and row.vetted and not row.shallow
        assert row.get("_ng_task_index") == 0
        assert decode_request(body, 200) is None

    def test_a_non_object_row_is_left_to_the_models(self) -> None:
        decoded = decode_request(
            b'[{"kind": "completed", "row": [1]}, {"kind": "failed", "row": {"a": 1}}]', 64
        )
        assert decoded == [{"kind": "completed", "row": [1]}, {"kind": "failed", "row": {"a": 1}}]


def _decoded(body: bytes, max_depth: int) -> Any:
    """``decode_request``'s answer with each ``RawRow`` as (bytes, vetted, shallow)."""
    events = decode_request(body, max_depth)
    if events is None:
        return None
    return [
        {
            key: (value.data, value.vetted, value.shallow) if isinstance(value, RawRow) else value
            for key, value in event.items()
        }
        for event in events
    ]


def _whole(body: bytes, max_depth: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    """:func:`_decoded` with the vetting pass cutting no rows (every body decoded whole)."""
    with monkeypatch.context() as patch:
        patch.setattr(raw_rows, "vet_event_rows", vet)
        return _decoded(body, max_depth)


class TestRawRow:
    @pytest.mark.parametrize(
        "data",
        [
            b'{"_ng_task_index": 3, "_ng_rollout_index": "r", "_ng_attempt_index": null, "ng_perf": {}}',
            b'{"_ng_task_index": 1, "_ng_task_index": 2, "_ng_no_persist": true, "_ng_dispatch_drained": 0}',
            b'{"_ng_failure_class": "timeout_exceeded", "_ng_failure_terminal": 1.5, "other": [1, 2]}',
            b"{}",
        ],
    )
    def test_answers_like_the_parsed_row(self, data: bytes) -> None:
        parsed = orjson.loads(data)
        for vetted in (True, False):
            row = RawRow(data, vetted=vetted)
            for key in ("_ng_task_index", "_ng_rollout_index", "_ng_attempt_index", "_ng_no_persist",
                        "_ng_dispatch_drained", "_ng_failure_class", "_ng_failure_terminal", "ng_perf",
                        "other", "missing"):  # fmt: skip
                assert row.get(key) == parsed.get(key)
                assert row.get(key, 0) == parsed.get(key, 0)
                assert (key in row) == (key in parsed)
            assert row.parsed() == parsed and row == parsed

    def test_a_line_is_kept_only_when_it_is_a_vetted_object(self) -> None:
        assert raw_line(b'{"a": 1}') is not None
        assert raw_line(b"[1]") is None
        assert raw_line(b'{"a": NaN}') is None
        assert raw_line(b"\xef\xbb\xbf{}") is None

    def test_row_spans_are_the_bytes_as_sent(self) -> None:
        body = b'{"events": [{"kind": "run_started"}, {"kind": "completed", "row": { "b" : 1 }}]}'
        assert row_spans(body) == [b"null", b'{ "b" : 1 }']
        assert row_spans(b'{"other": []}') is None


class TestFacts:
    def test_the_raw_path_derives_the_facts_and_keys_of_the_full_path(self) -> None:
        """Every completion of a faulty run (invalid trajectories, failure rows, no-persist rows,
        rows without a task index, duplicated identities, an agent's own ng_perf), as an orjson
        client sends it: same idempotency key as before rows were kept as bytes, same fact."""
        run = generate_run(num_tasks=10, repeats=3, fault_rate=0.06, failure_rate=0.2, drained_fraction=0.1)
        events = [event for event in run.events if event["kind"] in ("completed", "failed", "drained")]
        events.append({"kind": "completed", "seconds": 1.0, "row": {"ng_perf": {"num_turns": 2}}})
        events.append({"kind": "completed", "row": {"_ng_task_index": 99, "ng_trajectory": {"bad": 1}}})
        body = orjson.dumps(events)
        decoded = decode_request(body, 1024)
        assert decoded is not None
        raw_events, full_events = EventBatch.validate_python(decoded), _full(body)
        engines, now = default_engines(), time.time()
        for settings_ in (
            ("rollouts.jsonl", frozenset[str]()),
            ("r.jsonl", frozenset({"tool_call_failed"})),
            None,
        ):
            for raw, full in zip(raw_events, full_events, strict=True):
                assert idempotency_key("run", raw) == idempotency_key("run", full)
                facts = [
                    derive_fact(event, received_at=now, engines=engines, settings=settings_, keep_rows=True)
                    for event in (raw, full)
                ]
                assert facts[0] == facts[1]

    @pytest.mark.parametrize(
        ("tail", "everyday"),
        [
            (b"", True),
            (b', "_ng_attempt_index": 2, "_ng_task_index": 7', True),  # after the trajectory
            (b', "_ng_task_index": "t-1", "_ng_rollout_index": 3', True),
            (b', "_ng_no_persist": false, "_ng_failure_class": null', True),
            (b', "_ng_attempt_index": "2", "_ng_no_persist": 0', True),
            (b', "_ng_no_persist": true, "_ng_dispatch_drained": 1', False),
            (b', "_ng_failure_class": "timeout", "_ng_failure_terminal": true', False),
            (b', "_ng_failure_class": {"a": [1]}', False),
        ],
    )
    def test_the_fast_path_reads_the_keys_of_an_everyday_row(self, tail: bytes, everyday: bool) -> None:
        """The fast path's decode also reads the identity and disposition keys (wherever they
        sit, the last of duplicates winning): each such row gets the full path's fact and key,
        digested from its bytes exactly when it is an everyday row."""
        run = generate_run(num_tasks=2, repeats=1, fault_rate=0.0, failure_rate=0.0, drained_fraction=0.0)
        row = next(event["row"] for event in run.events if event["kind"] == "completed")
        row_bytes = orjson.dumps(row)[:-1] + tail + b"}"
        body = b'[{"kind": "completed", "seconds": 2.5, "row": ' + row_bytes + b"}]"
        decoded = decode_request(body, 1024)
        assert decoded is not None
        (raw,), (full,) = EventBatch.validate_python(decoded), _full(body)
        assert isinstance(raw.row, RawRow)
        settings_ = ("rollouts.jsonl", frozenset[str]())
        facts = [
            derive_fact(event, received_at=1.0, engines=default_engines(), settings=settings_)
            for event in (raw, full)
        ]
        assert facts[0] == facts[1]
        assert (facts[0].digest is not None) is everyday
        # the same identity; the content part hashes the bytes as sent (not orjson's formatting)
        heads = [idempotency_key("run", event).rpartition("|")[0] for event in (raw, full)]
        assert heads[0] == heads[1]

    def test_a_row_learns_keys_only_when_its_bytes_were_vetted(self) -> None:
        data = b'{"_ng_task_index": 1}'
        vetted, unvetted = RawRow(data, vetted=True), RawRow(data, vetted=False)
        for row in (vetted, unvetted):
            row.learn({"_ng_task_index": 5, "_ng_attempt_index": UNSET})
        assert (vetted.get("_ng_task_index"), "_ng_attempt_index" in vetted) == (5, False)
        assert unvetted.get("_ng_task_index") == 1  # read from the bytes themselves
        assert vetted.get("_ng_rollout_index", 0) == 0  # not learned: read from the bytes


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3"))
    await service.start()
    transport = httpx.ASGITransport(app=create_app(service), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as http:
        yield http
    await service.stop()


class TestService:
    async def test_a_retry_is_a_duplicate_whichever_path_its_body_took(
        self, client: httpx.AsyncClient
    ) -> None:
        path = "/v1/runs/r/events"
        assert (await client.post(path, json=[{"kind": "run_started"}])).status_code == 200
        event = {"kind": "completed", "seconds": 1.0, "row": {"_ng_task_index": 1, "reward": 1.0}}
        exotic = b'{"kind":"completed","row":{"_ng_task_index":2,"n":123456789012345678901234567890}}'
        sent = json.dumps(event).encode()  # not orjson's bytes: spaces after separators
        first = await client.post(path, content=b"[" + sent + b"]")
        # a body simdjson refuses (an integer past 64 bits in another row) takes the full path
        second = await client.post(path, content=b"[" + sent + b"," + exotic + b"]")
        assert first.status_code == second.status_code == 200, second.text
        assert first.json()["results"][0]["status"] == "accepted"
        assert [r["status"] for r in second.json()["results"]] == ["duplicate", "accepted"]

    async def test_refusals_are_worded_by_the_models(self, client: httpx.AsyncClient) -> None:
        path = "/v1/runs/r/events"
        assert (await client.post(path, json=[{"kind": "run_started"}])).status_code == 200
        cases = [
            ([{"kind": "completed", "row": {}, "colour": 1}], "events.0.colour"),
            ([{"kind": "completed", "row": [1]}], "events.0.row"),
            ([{"kind": "completed", "row": {}, "line": "{}"}], "events.0"),
            ([{"kind": "completed", "row": {}, "seconds": -1}], "events.0.seconds"),
            ([{"kind": "completed", "row": {}}, {"kind": "nope"}], "events.1.kind"),
        ]
        for body, field in cases:
            response = await client.post(path, content=orjson.dumps(body))
            assert response.status_code == 422, response.text
            assert response.json()["field"] == field


def _answer(parse: Any, body: bytes) -> Any:
    """What a parse step answers: the events (plain) or the refusal's status, error, field, detail."""
    try:
        return [_plain(event) for event in parse(body)]
    except RequestError as exc:
        return (exc.status, exc.error, exc.field, exc.detail)


class TestHostileBodies:
    """Mutated bodies: the raw path answers exactly what the full path answers, refusal or events."""

    _VALID = orjson.dumps(
        [
            {"kind": "completed", "seconds": 1.5, "row": {"_ng_task_index": 1, "a": [1, {"b": "c\\n"}]}},
            {"kind": "completed", "row": {"_ng_task_index": 4, "d": [[[[[1]]]]]}},  # 8 levels deep
            {"kind": "failed", "task_index": 2, "row": {"_ng_failure_class": "cancelled"}},
            {"kind": "completed", "line": '{"_ng_task_index": 3}', "line_number": 7},
        ]
    )
    _NOISE = st.sampled_from([*b'{}[]",:0123456789.-eE \\ntrufalsn\xff\xef\xbb\xbf', 0])

    @pytest.mark.parametrize("max_depth", [8, 9, 1024])
    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 2), _NOISE), min_size=1, max_size=4))
    def test_mutations_answer_alike(self, max_depth: int, edits: list[tuple[int, int, int]]) -> None:
        body = _mutated(self._VALID, edits)
        service = SimpleNamespace(settings=ServiceSettings(max_json_depth=max_depth))
        handlers = IngestHandlers(service, require_ready=lambda: None)  # type: ignore[arg-type]
        assert _answer(handlers._parse_events, bytes(body)) == _answer(handlers._parse_in_full, bytes(body))


def _mutated(valid: bytes, edits: list[tuple[int, int, int]]) -> bytearray:
    """``valid`` with each ``(position, action, byte)`` applied: 0 inserts, 1 deletes, 2 overwrites."""
    body = bytearray(valid)
    for position, action, byte in edits:
        at = position % (len(body) + 1)
        if action == 0:
            body[at:at] = bytes([byte])
        elif action == 1 and at < len(body):
            del body[at]
        elif at < len(body):
            body[at] = byte
    return body
