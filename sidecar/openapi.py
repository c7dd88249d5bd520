"""The service's OpenAPI 3.1 description, generated from the request models (for clients and fuzzers)."""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

from sidecar.events import EventBatch

__all__ = ["openapi_document"]

_ERROR = {
    "type": "object",
    "properties": {
        "error": {"type": "string"},
        "field": {"type": ["string", "null"]},
        "detail": {"type": "string"},
    },
    "required": ["error", "field", "detail"],
    "additionalProperties": False,
}
_RUN_ID_QUERY = {"name": "run_id", "in": "query", "required": True, "schema": {"type": "string"}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): _json({"$ref": "#/components/schemas/Error"}, "rejected") for status in statuses}


def _get(
    summary: str, ok: dict[str, Any], *params: dict[str, Any], errors: tuple[int, ...] = ()
) -> dict[str, Any]:
    return {
        "get": {"summary": summary, "parameters": list(params), "responses": {"200": ok, **_errors(*errors)}}
    }


@cache
def openapi_document() -> dict[str, Any]:
    batch = EventBatch.json_schema(ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = batch.pop("$defs", {})
    schemas["Error"] = _ERROR
    try:
        version = metadata.version("rollout-sidecar")
    except metadata.PackageNotFoundError:
        version = "0"
    result = {
        "type": "object",
        "properties": {
            "index": {"type": "integer"},
            "kind": {"type": "string"},
            "status": {"enum": ["accepted", "duplicate", "unknown_run", "not_in_flight"]},
            "seq": {"type": "integer"},
            "ng_perf": {"type": ["object", "null"]},
        },
        "required": ["index", "kind", "status"],
    }
    any_object = {"type": "object"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "rollout-sidecar", "version": version},
        "paths": {
            "/v1/runs/{run_id}/events": {
                "post": {
                    "summary": "Ingest a batch of events (acknowledged once durable).",
                    "parameters": [
                        {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "requestBody": {"required": True, "content": {"application/json": {"schema": batch}}},
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "run_id": {"type": "string"},
                                    "results": {"type": "array", "items": result},
                                },
                            },
                            "one result per event, in order",
                        ),
                        **_errors(400, 401, 404, 413, 422, 503),
                    },
                    "security": [{"bearer": []}],
                }
            },
            "/v1/runs/{run_id}/lines": {
                "post": {
                    "summary": "One raw rollout line as the body (a completed event without JSON escaping).",
                    "parameters": [
                        {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}},
                        *(
                            {"name": name, "in": "query", "required": required, "schema": {"type": kind}}
                            for name, kind, required in (
                                ("line_number", "integer", True),
                                ("generation", "integer", False),
                                ("seconds", "number", False),
                                ("latency_ms", "number", False),
                            )
                        ),
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                    },
                    "responses": {
                        "200": _json(any_object, "the event's result, as for /events"),
                        **_errors(400, 401, 404, 413, 422, 503),
                    },
                    "security": [{"bearer": []}],
                }
            },
            "/v1/runs": _get("Runs held.", _json(any_object, "runs")),
            "/v1/runs/{run_id}/inflight": _get(
                "In-flight rollouts of a run: count, ages, stragglers, the oldest (no payloads).",
                _json(any_object, "in-flight view"),
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}},
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 0, "maximum": 1000, "default": 20},
                },
                errors=(400, 404),
            ),
            "/v1/runs/{run_id}/timeline": _get(
                "A run's bounded time series (at most 1024 points, columnar; docs/report.md).",
                _json(any_object, "timeline"),
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}},
                errors=(404,),
            ),
            "/drain_margin": _get(
                "Drain margin of a run.",
                _json(any_object, "margin, samples, budget"),
                _RUN_ID_QUERY,
                {"name": "configured", "in": "query", "required": False, "schema": {"type": "string"}},
                errors=(400, 404),
            ),
            "/report": _get(
                "Post-run report.", _json(any_object, "report"), _RUN_ID_QUERY, errors=(400, 404)
            ),
            "/report/quality_summary.json": _get(
                "quality_summary.json bytes.", _json(any_object, "summary"), _RUN_ID_QUERY, errors=(400, 404)
            ),
            "/report/verdicts": _get(
                "rollout_verdicts.jsonl bytes.",
                {
                    "description": "JSON lines",
                    "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                },
                _RUN_ID_QUERY,
                errors=(400, 404),
            ),
            "/metrics": _get(
                "Prometheus exposition.",
                {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
            ),
            "/healthz": _get("Liveness.", _json(any_object, "alive")),
            "/readyz": _get("Readiness.", _json(any_object, "ready")),
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
