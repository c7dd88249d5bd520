"""The service's OpenAPI 3.1 description, generated from the request models and
:mod:`sidecar.http.responses`; every route has one :class:`Operation` (tests/sidecar/test_openapi.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from types import MappingProxyType
from typing import Any

from pydantic import TypeAdapter

from sidecar.http import responses as bodies
from sidecar.ingest.events import EventBatch

__all__ = ["OPERATIONS", "NonJSON", "Operation", "Param", "openapi_document"]

_REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class NonJSON:
    """A 200 body that is not JSON: its media type, and what it is."""

    media_type: str
    description: str


@dataclass(frozen=True)
class Param:
    """A path or query parameter."""

    name: str
    where: str = "query"
    required: bool = True
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "in": self.where, "required": self.required, "schema": dict(self.schema)}


@dataclass(frozen=True)
class Operation:
    """One route and method: its 200 body (a JSON type or :class:`NonJSON`), parameters, error
    statuses (each an ``ErrorBody``), other statuses with their own body, and request body."""

    summary: str
    ok: type[Any] | NonJSON
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    other: Mapping[int, type[Any]] = field(default_factory=dict)
    request: Mapping[str, Any] | None = None
    secured: bool = False


_RUN_ID_PATH = Param("run_id", "path")
_RUN_ID = Param("run_id")
_INGEST_ERRORS = (400, 401, 404, 413, 422, 429, 503)
_RUN_ERRORS = (400, 404, 503)
_NDJSON = "application/x-ndjson"
_LIMIT = Param("limit", "query", False, {"type": "integer", "minimum": 0, "maximum": 1000, "default": 20})


#: Every route the app serves, ``(method, path)`` -> its operation.
OPERATIONS: Mapping[tuple[str, str], Operation] = MappingProxyType(
    {
        ("POST", "/v1/runs/{run_id}/events"): Operation(
            "Ingest a batch of events (acknowledged once durable).",
            bodies.IngestBody,
            (_RUN_ID_PATH,),
            _INGEST_ERRORS,
            request={"application/json": {"schema": {"$ref": _REF.format(model="EventBatch")}}},
            secured=True,
        ),
        ("POST", "/v1/runs/{run_id}/lines"): Operation(
            "One raw rollout line as the body (a completed event without JSON escaping).",
            bodies.IngestBody,
            (
                _RUN_ID_PATH,
                Param("line_number", schema={"type": "integer"}),
                Param("generation", required=False, schema={"type": "integer"}),
                Param("seconds", required=False, schema={"type": "number"}),
                Param("latency_ms", required=False, schema={"type": "number"}),
            ),
            _INGEST_ERRORS,
            request={_NDJSON: {"schema": {"type": "string"}}},
            secured=True,
        ),
        ("GET", "/v1/runs"): Operation("Runs held.", bodies.RunListBody, errors=(503,)),
        ("GET", "/v1/runs/{run_id}/inflight"): Operation(
            "In-flight rollouts of a run: count, ages, stragglers, the oldest (no payloads).",
            bodies.InflightBody,
            (_RUN_ID_PATH, _LIMIT),
            _RUN_ERRORS,
        ),
        ("GET", "/v1/runs/{run_id}/forecast"): Operation(
            "The run's end forecast: finished and drained when the budget ends (docs/http-api.md).",
            bodies.ForecastBody,
            (_RUN_ID_PATH,),
            _RUN_ERRORS,
        ),
        ("GET", "/v1/runs/{run_id}/groups"): Operation(
            "Open task groups waiting longest on a repeat in flight (bounded; docs/http-api.md).",
            bodies.GroupsBody,
            (_RUN_ID_PATH, _LIMIT),
            _RUN_ERRORS,
        ),
        ("GET", "/v1/runs/{run_id}/timeline"): Operation(
            "A run's bounded time series (at most 1024 points, columnar; docs/report.md).",
            bodies.TimelineBody,
            (_RUN_ID_PATH,),
            _RUN_ERRORS,
        ),
        ("GET", "/v1/runs/{run_id}/page"): Operation(
            "What the run page draws besides the timeline (O(1) in the run's size; docs/report.md).",
            bodies.PageBody,
            (_RUN_ID_PATH,),
            _RUN_ERRORS,
        ),
        ("GET", "/"): Operation("The runs held, as a page (HTML).", NonJSON("text/html", "the run list")),
        ("GET", "/runs/{run_id}"): Operation(
            "One run's page (HTML; its data from /v1/runs/{run_id}/page and /timeline).",
            NonJSON("text/html", "the run page"),
            (_RUN_ID_PATH,),
            (404,),
        ),
        ("GET", "/static/{name}"): Operation(
            "The page's script, styles and vendored uPlot (package data; no CDN).",
            NonJSON("application/octet-stream", "a static file (text/javascript or text/css)"),
            (Param("name", "path"),),
            (404,),
        ),
        ("GET", "/drain_margin"): Operation(
            "Drain margin of a run: margin, samples, and with a budget the time left and start-now.",
            bodies.DrainMarginBody,
            (_RUN_ID, Param("configured", required=False)),
            _RUN_ERRORS,
        ),
        ("GET", "/report"): Operation("Post-run report.", bodies.ReportBody, (_RUN_ID,), _RUN_ERRORS),
        ("GET", "/report/quality_summary.json"): Operation(
            "quality_summary.json bytes.", bodies.QualitySummaryBody, (_RUN_ID,), _RUN_ERRORS
        ),
        ("GET", "/report/verdicts"): Operation(
            "rollout_verdicts.jsonl bytes.", NonJSON(_NDJSON, "JSON lines"), (_RUN_ID,), _RUN_ERRORS
        ),
        ("GET", "/metrics"): Operation("Prometheus exposition.", NonJSON("text/plain", "metrics")),
        ("GET", "/openapi.json"): Operation("This document.", bodies.OpenAPIBody),
        ("GET", "/healthz"): Operation("Liveness.", bodies.HealthzBody),
        ("GET", "/readyz"): Operation("Readiness.", bodies.ReadyBody, other={503: bodies.NotReadyBody}),
    }
)


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(kind: type[Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """A ``$ref`` to ``kind``'s schema, adding it (and what it refers to) to ``schemas``."""
    schema = TypeAdapter(kind).json_schema(ref_template=_REF)
    schemas.update(schema.pop("$defs", {}))
    schemas[kind.__name__] = schema
    return {"$ref": _REF.format(model=kind.__name__)}


def _operation(operation: Operation, schemas: dict[str, Any]) -> dict[str, Any]:
    ok = operation.ok
    if isinstance(ok, NonJSON):
        answer = {"description": ok.description, "content": {ok.media_type: {"schema": {"type": "string"}}}}
    else:
        answer = _json(_ref(ok, schemas), (ok.__doc__ or ok.__name__).split("\n")[0])
    responses = {"200": answer}
    for status, kind in operation.other.items():
        responses[str(status)] = _json(_ref(kind, schemas), (kind.__doc__ or kind.__name__).split("\n")[0])
    error = _ref(bodies.ErrorBody, schemas)
    for status in operation.errors:
        responses[str(status)] = _json(error, "refused")
    body: dict[str, Any] = {
        "summary": operation.summary,
        "parameters": [param.as_dict() for param in operation.params],
        "responses": responses,
    }
    if operation.request is not None:
        body["requestBody"] = {"required": True, "content": dict(operation.request)}
    if operation.secured:
        body["security"] = [{"bearer": []}]
    return body


@cache
def openapi_document() -> dict[str, Any]:
    batch = EventBatch.json_schema(ref_template=_REF)
    schemas: dict[str, Any] = batch.pop("$defs", {})
    schemas["EventBatch"] = batch
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), operation in OPERATIONS.items():
        paths.setdefault(path, {})[method.lower()] = _operation(operation, schemas)
    schemas["Error"] = schemas["ErrorBody"]  # the name the document always had
    try:
        version = metadata.version("rollout-sidecar")
    except metadata.PackageNotFoundError:
        version = "0"
    return {
        "openapi": "3.1.0",
        "info": {"title": "rollout-sidecar", "version": version},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
