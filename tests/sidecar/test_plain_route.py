"""The ingest route served as plain ASGI: what it takes, what it passes on, and that its answers
are the Starlette route's, byte for byte."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.types import Message, Receive, Scope, Send

from sidecar.http._plain_route import PlainPostRoute
from sidecar.http.errors import RequestError
from sidecar.http.service import Service
from sidecar.http.settings import Secret, ServiceSettings

from .service_support import generate_run

TOKEN = "plain-route-token"


class _Recorder:
    """A fallback app and a handler that record what reached them."""

    def __init__(self, raises: Exception | None = None) -> None:
        self.fallback: list[tuple[str, str]] = []
        self.handled: list[str] = []
        self.raises = raises

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.fallback.append((scope["type"], scope.get("path", "")))

    async def handler(self, parameter: str, headers: Any, receive: Receive) -> bytes:
        self.handled.append(parameter)
        if self.raises is not None:
            raise self.raises
        return b'{"ok":true}'


def _route(recorder: _Recorder) -> PlainPostRoute:
    return PlainPostRoute(
        recorder.app,
        re.compile(r"/v1/runs/([^/]+)/events"),
        recorder.handler,
        render_error=lambda exc: orjson.dumps({"error": exc.error, "field": exc.field}),
    )


async def _call(route: PlainPostRoute, scope: dict[str, Any]) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await route({"headers": [], "root_path": "", **scope}, receive, send)
    return sent


class TestRouting:
    async def test_takes_only_a_post_on_an_exact_path(self) -> None:
        recorder = _Recorder()
        route = _route(recorder)
        sent = await _call(route, {"type": "http", "method": "POST", "path": "/v1/runs/r-1/events"})
        assert recorder.handled == ["r-1"]
        assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
        assert sent[0]["status"] == 200 and sent[1]["body"] == b'{"ok":true}'
        passed = [
            {"type": "http", "method": "GET", "path": "/v1/runs/r/events"},
            {"type": "http", "method": "POST", "path": "/v1/runs/r/events/"},
            {"type": "http", "method": "POST", "path": "/v1/runs/r/x/events"},
            {"type": "http", "method": "POST", "path": "/v1/runs/r/events\n"},
            {"type": "http", "method": "POST", "path": "/api/v1/runs/r/events", "root_path": "/api"},
            {"type": "lifespan"},
        ]
        for scope in passed:
            assert await _call(route, scope) == []
        assert recorder.handled == ["r-1"]
        assert len(recorder.fallback) == len(passed)

    async def test_refusal_headers_in_starlettes_order(self) -> None:
        refusal = RequestError(401, "unauthorized", "no", "authorization", {"WWW-Authenticate": "Bearer"})
        route = _route(_Recorder(raises=refusal))
        start, body = await _call(route, {"type": "http", "method": "POST", "path": "/v1/runs/r/events"})
        assert start["status"] == 401
        assert body["body"] == b'{"error":"unauthorized","field":"authorization"}'
        names = [name for name, _ in start["headers"]]
        assert names == [b"www-authenticate", b"content-length", b"content-type", b"server-timing"]
        assert dict(start["headers"])[b"content-length"] == str(len(body["body"])).encode()

    async def test_an_unexpected_error_reaches_the_app_s_error_layer(self) -> None:
        route = _route(_Recorder(raises=RuntimeError("bug")))
        with pytest.raises(RuntimeError, match="bug"):
            await _call(route, {"type": "http", "method": "POST", "path": "/v1/runs/r/events"})


# -- the real app: the plain route against Starlette's route for the same requests ---------


@pytest.fixture
async def clients(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two fresh services: one asked on the plain route, one (mounted at a root path) on
    Starlette's."""
    from sidecar.http.app import create_app

    services = [
        Service(
            ServiceSettings(
                journal_path=tmp_path / f"{name}.sqlite3", token=Secret(TOKEN), body_cap=256 * 1024
            )
        )
        for name in ("plain", "starlette")
    ]
    for service in services:
        await service.start()
    plain = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(services[0])), base_url="http://s")
    mounted = httpx.ASGITransport(app=create_app(services[1]), root_path="/mounted")
    starlette = httpx.AsyncClient(transport=mounted, base_url="http://s/mounted")
    try:
        yield plain, starlette
    finally:
        await plain.aclose()
        await starlette.aclose()
        for service in services:
            await service.stop()


def _answer(response: httpx.Response) -> tuple[int, bytes, list[str]]:
    names = [name for name in response.headers if name != "server-timing"]
    assert re.fullmatch(r"app;dur=\d+\.\d{3}", response.headers["server-timing"])
    return response.status_code, response.content, names


async def test_answers_equal_starlettes(clients: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    run = generate_run(num_tasks=4, repeats=2, payload_bytes_per_call=128)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    requests: list[tuple[str, dict[str, Any]]] = [
        ("/v1/runs/r/events", {"json": [{"kind": "run_started", "plan": run.plan}]}),
        ("/v1/runs/r/events", {"json": run.events[:8], "headers": {}}),
        ("/v1/runs/r/events", {"json": run.events[:8]}),
        ("/v1/runs/r/events", {"json": run.events[:8]}),  # a retry: duplicates
        ("/v1/runs/r/events", {"json": {"events": run.events[8:]}}),
        ("/v1/runs/r/events", {"content": b"[1,"}),
        ("/v1/runs/r/events", {"content": b"x" * 300_000}),
        ("/v1/runs/r/events", {"json": [{"kind": "completed", "seconds": "1", "row": {}}]}),
        ("/v1/runs/other/events", {"json": [{"kind": "completed", "seconds": 1, "row": {}}]}),
        ("/v1/runs/bad%20id/events", {"json": [{"kind": "run_started"}]}),
    ]
    statuses = []
    for path, options in requests:
        options = {"headers": auth, **options}
        answers = [_answer(await client.post(path, **options)) for client in clients]
        assert answers[0] == answers[1], (path, options.get("headers"))
        statuses.append(answers[0][0])
    assert statuses == [200, 401, 200, 200, 200, 400, 413, 422, 404, 400]
