"""One definition of the event contract: the service's models (one per kind of :mod:`sidecar.wire`);
the client's builders and ``/openapi.json`` agree with them, and drift names the field."""

from __future__ import annotations

from typing import Any, get_args

import orjson

from dispatcher_client import client as client_events
from sidecar.http.openapi import openapi_document
from sidecar.ingest import events
from sidecar.wire import EventKind, EventNumber, LatencyOp, OutcomeStatus

_MODELS = {
    get_args(model.model_fields["kind"].annotation)[0]: model
    for model in (
        events.RunStarted,
        events.Completed,
        events.Failed,
        events.Drained,
        events.RunEnded,
        events.Latency,
        events.Started,
        events.Heartbeat,
    )
}


class TestOneDefinition:
    def test_every_kind_has_one_model(self) -> None:
        assert set(_MODELS) == {kind.value for kind in EventKind}

    def test_latency_ops_are_the_enum(self) -> None:
        assert set(get_args(events.Latency.model_fields["op"].annotation)) == set(LatencyOp)


class TestClientBuilders:
    def _valid(self, event: dict[str, Any]) -> None:
        assert set(event) <= set(_MODELS[event["kind"]].model_fields), event
        events.EventBatch.validate_python([event])  # the server's models accept it as built

    def test_every_builder_builds_what_the_models_accept(self) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0}
        number = EventNumber("src", 3)
        built = [
            client_events.run_started_event(
                plan={0: 1}, dispatch_budget_s=5.0, drain_margin_s=1.0, materialized_inputs=None, fields={}
            ),
            client_events.completed_event(row, {"reward": 1.0}, 1.5, 1500.0, number),
            client_events.failed_event(row, {"error": "x"}, 1.0, number),
            client_events.drained_event(row, {"reward": 0.0}, number),
            client_events.progress_event(EventKind.STARTED, row),
            client_events.progress_event(EventKind.HEARTBEAT, row),
            client_events.run_ended_event(),
            client_events.run_ended_event(7),
            *(client_events.latency_event(op, 0.5, "src", 1) for op in LatencyOp),
            client_events.latency_event(LatencyOp.RECORD_DRAINED, None, "src", 2),
        ]
        for event in built:
            assert event is not None
            self._valid(event)
        kinds = {event["kind"] for event in built if event is not None}
        assert kinds == {kind.value for kind in EventKind}

    def test_builders_encode_kinds_as_plain_strings(self) -> None:
        assert orjson.loads(client_events.encode_event(client_events.run_ended_event())) == {
            "kind": "run_ended"
        }
        assert client_events.latency_event(LatencyOp.RECORD, None, "s", 0) == {
            "kind": "latency",
            "op": "record",
            "source": "s",
            "seq": 0,
        }


class TestOpenAPI:
    def test_event_kinds_and_statuses_come_from_the_schema(self) -> None:
        document = openapi_document()
        schemas = document["components"]["schemas"]
        kinds = set()
        for name, model in ((model.__name__, model) for model in _MODELS.values()):
            kind = schemas[name]["properties"]["kind"]
            kinds.add(kind["const"])
            assert set(schemas[name]["properties"]) == set(model.model_fields), name
        assert kinds == {kind.value for kind in EventKind}
        text = orjson.dumps(document).decode()
        for status in OutcomeStatus:
            assert f'"{status.value}"' in text
