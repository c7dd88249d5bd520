"""``/openapi.json`` covers every route the app registers, each with its real response schema,
and the service's real answers validate against the declared types (closed: no stray key)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter
from starlette.routing import BaseRoute, Mount, Route

from sidecar.http.app import create_app
from sidecar.http.openapi import OPERATIONS, NonJSON, Operation, openapi_document
from sidecar.http.responses import ErrorBody
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings


def _route_keys(routes: list[BaseRoute]) -> set[tuple[str, str]]:
    """``(method, path)`` of every route the app registers (``HEAD`` rides on ``GET``); a mount
    (static files) is ``GET`` on its path."""
    keys = set()
    for route in routes:
        if isinstance(route, Route):
            keys |= {(method, route.path) for method in route.methods or () if method != "HEAD"}
        elif isinstance(route, Mount):
            keys.add(("GET", route.path))
        else:  # a kind of route this test does not know how to name: teach it
            raise AssertionError(f"unknown route type {type(route).__name__}: {route!r}")
    return keys


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    svc = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3"))
    await svc.start()
    yield svc
    await svc.stop()


@pytest.fixture
async def client(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as c:
        yield c


class TestEveryRouteIsDeclared:
    def test_the_apps_routes_are_exactly_the_declared_operations(self, service: Service) -> None:
        registered = _route_keys(create_app(service).routes)
        undeclared = registered - set(OPERATIONS)
        assert not undeclared, (
            f"routes without an entry in sidecar.http.openapi.OPERATIONS: {sorted(undeclared)}"
        )
        stale = set(OPERATIONS) - registered
        assert not stale, f"sidecar.http.openapi.OPERATIONS declares routes the app lacks: {sorted(stale)}"

    def test_every_operation_is_in_the_document(self) -> None:
        paths = openapi_document()["paths"]
        for method, path in OPERATIONS:
            assert method.lower() in paths.get(path, {}), (method, path)

    @pytest.mark.parametrize("key", sorted(OPERATIONS))
    def test_every_json_answer_has_a_real_schema(self, key: tuple[str, str]) -> None:
        """No JSON answer is a bare ``{"type": "object"}``: each names its keys and closes."""
        operation = OPERATIONS[key]
        if isinstance(operation.ok, NonJSON):
            return
        schema = TypeAdapter(operation.ok).json_schema()
        assert schema.get("properties") and schema.get("additionalProperties") is False, key
        content = openapi_document()["paths"][key[1]][key[0].lower()]["responses"]["200"]["content"]
        assert content["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{operation.ok.__name__}"
        }

    def test_error_bodies_share_one_schema(self) -> None:
        schemas = openapi_document()["components"]["schemas"]
        assert schemas["Error"] == schemas["ErrorBody"] == TypeAdapter(ErrorBody).json_schema()


def _operation(response: httpx.Response) -> tuple[tuple[str, str], Operation]:
    path = response.request.url.path
    for (method, template), operation in OPERATIONS.items():
        if method != response.request.method:
            continue
        prefix, _, suffix = template.partition("{run_id}")
        if path == template or ("{run_id}" in template and path.startswith(prefix) and path.endswith(suffix)):
            return (method, template), operation
    raise AssertionError(f"no operation for {response.request.method} {path}")


def _conforms(response: httpx.Response) -> Any:
    """Validate ``response`` against what its operation declares for its status."""
    key, operation = _operation(response)
    status = response.status_code
    if status == 200 and isinstance(operation.ok, NonJSON):
        assert response.headers["content-type"].startswith(operation.ok.media_type), key
        return response.content
    if status == 200:
        declared: Any = operation.ok
    elif status in operation.other:
        declared = operation.other[status]
    elif status in operation.errors:
        declared = ErrorBody
    else:
        raise AssertionError(
            f"{key} answered {status}, which its operation does not declare: {response.text}"
        )
    return TypeAdapter(declared).validate_json(response.content, strict=True)


class TestRealAnswersConform:
    async def test_a_run_from_start_to_end(self, client: httpx.AsyncClient) -> None:
        row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "agent_ref": {"name": "a"}}
        events = [
            {"kind": "run_started", "plan": {"0": 2}, "dispatch_budget_s": 600.0, "drain_margin_s": 5.0},
            {"kind": "started", "task_index": 0, "rollout_index": 0},
            {"kind": "started", "task_index": 0, "rollout_index": 1},
            {"kind": "heartbeat", "task_index": 0, "rollout_index": 1},
            {"kind": "heartbeat", "task_index": 9},
            {"kind": "started", "task_index": 2},  # still in flight at the end
            {"kind": "completed", "seconds": 1.5, "row": row, "source": "s", "seq": 0},
            {
                "kind": "failed",
                "task_index": 0,
                "rollout_index": 1,
                "seconds": 0.5,
                "failure_class": "timeout",
            },
            {"kind": "latency", "op": "record", "seconds": 1.0, "source": "t", "seq": 0},
        ]
        now = time.time()  # stamped as a dispatcher stamps them: the timeline has points
        events[0]["started_at"] = now - 10.0
        for offset, event in enumerate(events[1:]):
            if event["kind"] != "heartbeat":
                event["at"] = now - 9.0 + offset
        answer = _conforms(await client.post("/v1/runs/r1/events", json=events))
        assert {result["status"] for result in answer["results"]} == {"accepted", "not_in_flight"}
        assert (
            _conforms(await client.post("/v1/runs/r1/events", json=events[5:6]))["results"][0]["status"]
            == "duplicate"
        )
        line = b'{"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.0}\n'
        _conforms(await client.post("/v1/runs/r1/lines", params={"line_number": 1}, content=line))
        for get in ("/drain_margin", "/report", "/report/quality_summary.json", "/report/verdicts"):
            _conforms(await client.get(get, params={"run_id": "r1"}))
        margin = _conforms(await client.get("/drain_margin", params={"run_id": "r1", "configured": "3"}))
        assert {"budget_deadline", "seconds_left", "start_now"} <= set(margin)
        live = _conforms(await client.get("/v1/runs/r1/inflight"))
        assert live["ended"] is False and live["oldest"]
        running = _conforms(await client.get("/v1/runs/r1/timeline"))
        assert running["status"] == "running" and running["t"]
        page = _conforms(await client.get("/v1/runs/r1/page"))
        assert page["run_id"] == "r1" and page["source"] == "live"
        assert [(agent["agent"], agent["rollouts"]) for agent in page["agents"]] == [("a", 1)]
        for get in ("/v1/runs", "/healthz", "/readyz", "/openapi.json", "/metrics"):
            _conforms(await client.get(get))
        _conforms(await client.post("/v1/runs/r1/events", json=[{"kind": "run_ended"}]))
        ended = _conforms(await client.get("/v1/runs/r1/inflight"))
        assert ended["ended"] is True
        report = _conforms(await client.get("/report", params={"run_id": "r1"}))
        assert report["inflight_at_end"] is not None
        assert _conforms(await client.get("/v1/runs/r1/page"))["status"] == "ended"
        frozen = _conforms(await client.get("/v1/runs/r1/timeline"))
        assert frozen["frozen"] is True
        assert sum(frozen["series"]["completed"]) == report["events"]["completed"]

    async def test_refusals_conform(self, client: httpx.AsyncClient) -> None:
        for response in (
            await client.get("/report", params={"run_id": "zz"}),
            await client.get("/drain_margin"),
            await client.get("/v1/runs/zz/inflight", params={"limit": "x"}),
            await client.post("/v1/runs/r1/events", json=[{"kind": "nope"}]),
            await client.post("/v1/runs/r1/lines", content=b"{}"),
        ):
            assert response.status_code >= 400
            _conforms(response)

