"""Refusals are raised where they happen and rendered and counted by the app's one handler."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from sidecar.http.app import create_app
from sidecar.http.errors import RequestError, error_body
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Service]]:
    service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3"))
    await service.start()
    transport = httpx.ASGITransport(app=create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as http:
        yield http, service
    await service.stop()


def _errors(service: Service) -> dict[str, float]:
    """The error counters as the exposition format states them (``/metrics`` caches briefly)."""
    text = generate_latest(service.metrics.registry).decode()
    counts = re.findall(r'^rollout_sidecar_ingest_errors_total\{reason="(\w+)"\} (\S+)$', text, re.M)
    return {reason: float(value) for reason, value in counts}


async def test_each_refusal_counts_under_its_error_code(client: tuple[httpx.AsyncClient, Service]) -> None:
    http, service = client
    refusals = [
        ("GET", "/drain_margin?run_id=nope", 404, "unknown_run"),
        ("GET", "/drain_margin", 400, "validation"),
        ("GET", "/report?run_id=nope", 404, "unknown_run"),
        ("GET", "/v1/runs/nope/inflight", 404, "unknown_run"),
        ("POST", "/v1/runs/r1/events", 400, "invalid_json"),
        ("POST", "/v1/runs/-bad/events", 400, "validation"),
    ]
    for method, path, status, error in refusals:
        before = _errors(service)
        response = await http.request(method, path, content=b"{")
        assert response.status_code == status, (path, response.text)
        assert response.json()["error"] == error
        after = _errors(service)
        assert after[error] == before[error] + 1, path
        assert sum(after.values()) == sum(before.values()) + 1, path


async def test_unknown_routes_answer_the_same_body_uncounted(
    client: tuple[httpx.AsyncClient, Service],
) -> None:
    http, service = client
    before = _errors(service)
    missing = await http.get("/nope")
    assert (missing.status_code, missing.json()) == (404, error_body("not_found", "path", "no route /nope"))
    wrong = await http.delete("/healthz")
    assert wrong.status_code == 405 and wrong.json()["field"] == "method"
    assert _errors(service) == before


def test_request_error_reason_is_explicit() -> None:
    assert RequestError(503, "starting", "replaying").reason == "starting"
    assert RequestError(503, "starting", "replaying", counted=False).reason is None
