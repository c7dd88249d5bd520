"""The HTTP surface in-process (httpx over ASGI): auth, bounds, error bodies, probes, canary."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.http.app import create_app
from sidecar.http.logging import configure_logging
from sidecar.http.service import Service
from sidecar.http.settings import Secret, ServiceSettings, SettingsError, is_loopback, load_token
from sidecar.journal import Journal, JournalEvent, JournalUnavailable

from .service_support import generate_run

TOKEN = "s3cret-token-value"
CANARY = "CANARY-7f3a9c-do-not-leak"


class FlakyJournal(Journal):
    """A real journal whose appends can be made to fail as on a full disk (or with a bug)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.failing = False
        self.broken = False

    async def append(self, events: Sequence[JournalEvent]) -> list[JournalEvent | None]:
        if self.failing:
            raise JournalUnavailable("database or disk is full (simulated)")
        if self.broken:
            raise RuntimeError("simulated bug")
        return await super().append(events)


async def _client(service: Service) -> httpx.AsyncClient:
    await service.start()
    # Starlette re-raises after answering 500 (so servers log it); the 500 body is what we test.
    transport = httpx.ASGITransport(app=create_app(service), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://sidecar")


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    svc = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3", body_cap=32 * 1024, max_json_depth=32))
    yield svc
    await svc.stop()


@pytest.fixture
async def client(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    async with await _client(service) as c:
        yield c


def _error(response: httpx.Response, status: int, error: str, field: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == error
    assert body["field"] == field
    assert isinstance(body["detail"], str) and body["detail"]
    return body


class TestSettings:
    def test_non_loopback_bind_needs_a_token(self) -> None:
        with pytest.raises(SettingsError, match=r"0\.0\.0\.0"):
            ServiceSettings(host="0.0.0.0").check_bind()
        ServiceSettings(host="0.0.0.0", token=Secret("x")).check_bind()
        ServiceSettings(host="::1").check_bind()
        assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")

    @pytest.mark.parametrize(
        ("flag", "value", "named"),
        [("--max-inflight", "0", "--max-inflight"), ("--write-timeout", "-1", "--write-timeout")],
    )
    def test_serve_cli_refuses_new_limits_out_of_range_in_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, named: str
    ) -> None:
        from sidecar.cli import main

        args = ["serve", "--port", "0", "--journal", str(tmp_path / "j"), f"{flag}={value}"]
        with pytest.raises(SystemExit) as exited:  # the parser's ranged type refuses it
            main(args)
        assert exited.value.code == 2
        err = capsys.readouterr().err.strip()
        assert named in err and value in err and "\n" not in err
        assert not (tmp_path / "j").exists()

    def test_serve_cli_refuses_public_bind_without_token(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from sidecar.cli import main

        monkeypatch.delenv("ROLLOUT_SIDECAR_TOKEN", raising=False)
        assert main(["serve", "--host", "0.0.0.0", "--port", "0", "--journal", str(tmp_path / "j")]) == 2
        assert "without a bearer token" in capsys.readouterr().err
        assert not (tmp_path / "j").exists()

    def test_token_sources_and_repr(self, tmp_path: Path) -> None:
        token_file = tmp_path / "token"
        token_file.write_text(f"  {TOKEN}\n")
        secret = load_token(token_file, env={})
        assert secret is not None and secret.get() == TOKEN
        assert TOKEN not in repr(secret) and TOKEN not in str(ServiceSettings(token=secret))
        env_secret = load_token(None, env={"ROLLOUT_SIDECAR_TOKEN": "abc"})
        assert env_secret is not None and env_secret.get() == "abc"
        assert load_token(None, env={}) is None
        token_file.write_text("")
        with pytest.raises(SettingsError, match="empty"):
            load_token(token_file, env={})


class TestAuth:
    async def test_mutations_need_the_bearer_token_reads_do_not(self, tmp_path: Path) -> None:
        service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3", token=Secret(TOKEN)))
        try:
            async with await _client(service) as client:
                path = "/v1/runs/r/events"
                start = [{"kind": "run_started"}]
                missing = await client.post(path, json=start)
                _error(missing, 401, "unauthorized", "authorization")
                assert missing.headers["www-authenticate"] == "Bearer"
                wrong = await client.post(path, json=start, headers={"Authorization": "Bearer nope"})
                _error(wrong, 401, "unauthorized", "authorization")
                basic = await client.post(path, json=start, headers={"Authorization": f"Basic {TOKEN}"})
                _error(basic, 401, "unauthorized", "authorization")
                ok = await client.post(path, json=start, headers={"Authorization": f"Bearer {TOKEN}"})
                assert ok.status_code == 200
                assert (await client.get("/drain_margin", params={"run_id": "r"})).status_code == 200
                assert (await client.get("/metrics")).status_code == 200
                assert 'reason="unauthorized"} 3.0' in (await client.get("/metrics")).text
        finally:
            await service.stop()


class TestIngestErrors:
    async def test_error_bodies(self, client: httpx.AsyncClient) -> None:
        path = "/v1/runs/r/events"
        _error(await client.post(path, content=b"[1,"), 400, "invalid_json", "body")
        _error(await client.post(path, content=b"[" * 40 + b"]" * 40), 400, "too_deep", "body")
        _error(await client.post(path, content=b"x" * 40_000), 413, "too_large", "body")
        _error(
            await client.post(path, json=[{"kind": "completed", "seconds": 1, "row": {}}]),
            404,
            "unknown_run",
            "run_id",
        )
        await client.post(path, json=[{"kind": "run_started", "plan": {"0": 2}}])
        _error(
            await client.post(path, json=[{"kind": "completed", "seconds": "1", "row": {}}]),
            422,
            "validation",
            "events.0.seconds",
        )
        _error(
            await client.post(path, json=[{"kind": "completed", "seconds": 1}]), 422, "validation", "events.0"
        )
        _error(
            await client.post(path, json=[{"kind": "completed", "seconds": 1, "row": {}, "x": 1}]),
            422,
            "validation",
            "events.0.x",
        )
        _error(
            await client.post(path, json=[{"kind": "drained"}, {"kind": "launch"}]),
            422,
            "validation",
            "events.1.kind",
        )
        _error(await client.post(path, json={"kind": "run_ended"}), 422, "validation", "events")
        _error(
            await client.post(path, json=[{"kind": "run_started", "ignored_checks": ["nope"]}]),
            422,
            "validation",
            "events.0.ignored_checks",
        )
        _error(
            await client.post(
                path,
                json=[
                    {"kind": "run_ended"},
                    {"kind": "run_started", "materialized_inputs": "/nonexistent/x"},
                ],
            ),
            422,
            "validation",
            "events.1.materialized_inputs",
        )
        _error(await client.get("/nowhere"), 404, "not_found", "path")
        _error(await client.delete(path), 405, "method_not_allowed", "method")

    async def test_chunked_body_over_the_cap(self, client: httpx.AsyncClient) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 8192

        _error(await client.post("/v1/runs/r/events", content=chunks()), 413, "too_large", "body")

    async def test_journal_unavailable_is_503_and_stores_nothing(self, tmp_path: Path) -> None:
        journal = FlakyJournal(tmp_path / "j.sqlite3")
        service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3"), journal=journal)
        try:
            async with await _client(service) as client:
                path = "/v1/runs/r/events"
                assert (await client.post(path, json=[{"kind": "run_started"}])).status_code == 200
                journal.failing = True
                response = await client.post(path, json=[{"kind": "completed", "seconds": 5.0, "row": {}}])
                _error(response, 503, "journal_unavailable", None)
                assert response.headers["retry-after"] == "1"
                assert service.ingestor.runs["r"].completed == 0
                assert (await client.get("/drain_margin", params={"run_id": "r"})).json()["samples"] == 0
                assert 'reason="journal_unavailable"} 1.0' in (await client.get("/metrics")).text
                assert (await client.get("/readyz")).status_code == 503
                journal.failing = False
                retry = await client.post(path, json=[{"kind": "completed", "seconds": 5.0, "row": {}}])
                assert retry.json()["results"][0]["status"] == "accepted"
                assert service.ingestor.runs["r"].completed == 1
                assert (await client.get("/readyz")).status_code == 200
                journal.broken = True
                crash = await client.post(path, json=[{"kind": "completed", "seconds": 6.0, "row": {"n": 1}}])
                _error(crash, 500, "internal", None)
                journal.broken = False
                after = await client.post(path, json=[{"kind": "completed", "seconds": 6.0, "row": {"n": 1}}])
                assert after.json()["results"][0]["status"] == "accepted"  # the sequencer survived
        finally:
            await service.stop()


class TestReads:
    async def test_probes(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).json() == {"status": "ready", "runs": 0, "replayed": 0}

    async def test_drain_margin_with_budget(self, client: httpx.AsyncClient) -> None:
        path = "/v1/runs/b/events"
        start = {
            "kind": "run_started",
            "dispatch_budget_s": 3600.0,
            "drain_margin_s": 120.0,
            "started_at": 1.0e9,
        }
        await client.post(path, json=[start])
        body = (await client.get("/drain_margin", params={"run_id": "b"})).json()
        assert body["drain_margin"] == 120.0 and body["configured"] == 120.0
        assert body["budget_deadline"] == 1.0e9 + 3600.0
        assert body["seconds_left"] < 0 and body["start_now"] is False
        adaptive = (await client.get("/drain_margin", params={"run_id": "b", "configured": "null"})).json()
        assert adaptive["drain_margin"] == 120.0  # "null" means the run's configured value
        zero = (await client.get("/drain_margin", params={"run_id": "b", "configured": "0"})).json()
        assert zero["drain_margin"] == 0.0
        _error(
            await client.get("/drain_margin", params={"run_id": "b", "configured": "soon"}),
            400,
            "validation",
            "configured",
        )
        for bad in ("-1", "inf", "nan"):
            _error(
                await client.get("/drain_margin", params={"run_id": "b", "configured": bad}),
                400,
                "validation",
                "configured",
            )
        _error(await client.get("/drain_margin", params={"run_id": "zz"}), 404, "unknown_run", "run_id")
        _error(await client.get("/drain_margin"), 400, "validation", "run_id")
        _error(await client.get("/report", params={"run_id": "zz"}), 404, "unknown_run", "run_id")
        _error(await client.get("/report/verdicts", params={"run_id": "zz"}), 404, "unknown_run", "run_id")

    async def test_openapi_describes_every_route(self, client: httpx.AsyncClient) -> None:
        document = (await client.get("/openapi.json")).json()
        assert document["openapi"] == "3.1.0"
        assert {
            "/v1/runs/{run_id}/events",
            "/drain_margin",
            "/report",
            "/report/verdicts",
            "/metrics",
            "/v1/runs/{run_id}/inflight",
        } <= set(document["paths"])
        body = document["paths"]["/v1/runs/{run_id}/events"]["post"]["requestBody"]["content"][
            "application/json"
        ]
        assert body["schema"] == {"$ref": "#/components/schemas/EventBatch"}
        assert document["components"]["schemas"]["EventBatch"]["type"] == "array"
        kinds = {"RunStarted", "Completed", "Failed", "Drained", "RunEnded", "Started", "Heartbeat", "Error"}
        assert kinds <= set(document["components"]["schemas"])

    async def test_openmetrics_negotiation(self, client: httpx.AsyncClient) -> None:
        om = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert om.text.endswith("# EOF\n")
        plain = await client.get("/metrics")
        assert plain.headers["content-type"].startswith("text/plain")


def _plant(value: Any) -> Any:
    """Append the canary to every prompt, response and tool-output text in a row."""
    if isinstance(value, dict):
        return {
            key: (
                f"{item} {CANARY}"
                if key in ("text", "content", "output", "arguments_text") and isinstance(item, str)
                else _plant(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_plant(item) for item in value]
    return value


class TestCanary:
    async def test_no_row_text_in_metrics_report_verdicts_or_logs(self, tmp_path: Path) -> None:
        run = generate_run(num_tasks=6, repeats=2, seed=3, fault_rate=0.05, text_hook=_plant)
        planted = sum(CANARY.encode() in line for line in run.main_lines)
        assert planted >= len(run.main_lines) // 2, "the canary must actually be in the rows"
        logs = io.StringIO()
        configure_logging("debug", stream=logs, json=True)
        service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3", token=Secret(TOKEN)))
        try:
            async with await _client(service) as client:
                auth = {"Authorization": f"Bearer {TOKEN}"}
                path = "/v1/runs/c/events"
                await client.post(path, json=[{"kind": "run_started"}], headers=auth)
                for start in range(0, len(run.events), 8):
                    response = await client.post(path, json=run.events[start : start + 8], headers=auth)
                    assert response.status_code == 200
                await client.post(
                    path,
                    content=orjson.dumps([{"kind": "completed", "seconds": 1, "row": CANARY}]),
                    headers=auth,
                )
                await client.post(path, content=b'[{"kind": "' + CANARY.encode() + b'"}]', headers=auth)
                await client.post(path, json=[{"kind": "run_ended"}], headers={"Authorization": "Bearer bad"})
                await client.post(path, json=[{"kind": "run_ended"}], headers=auth)
                outputs = [
                    (await client.get("/metrics")).content,
                    (await client.get("/report", params={"run_id": "c"})).content,
                    (await client.get("/report/verdicts", params={"run_id": "c"})).content,
                    (await client.get("/report/quality_summary.json", params={"run_id": "c"})).content,
                ]
        finally:
            await service.stop()
            structlog.reset_defaults()
            logging.getLogger().handlers.clear()
        assert b'"verdict"' in outputs[2]
        for output in outputs:
            assert CANARY.encode() not in output
        text = logs.getvalue()
        assert "request rejected" in text and "service ready" in text
        assert CANARY not in text and TOKEN not in text


_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text()
)
_bodies = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)
_event_like = st.fixed_dictionaries(
    {"kind": st.sampled_from(["run_started", "completed", "failed", "drained", "run_ended", "latency", "x"])},
    optional={
        "seconds": _scalars,
        "row": _bodies,
        "line": st.text(),
        "task_index": _scalars,
        "rollout_index": _scalars,
        "attempt": _scalars,
        "plan": _bodies,
        "terminal": _scalars,
        "line_number": _scalars,
    },
)


class TestFuzz:
    @settings(max_examples=120, deadline=None)
    @given(body=st.lists(_event_like, max_size=4) | _bodies)
    async def test_no_body_gets_a_5xx(self, tmp_path_factory: pytest.TempPathFactory, body: Any) -> None:
        service = Service(ServiceSettings(journal_path=tmp_path_factory.mktemp("fuzz") / "j.sqlite3"))
        try:
            async with await _client(service) as client:
                await client.post("/v1/runs/f/events", json=[{"kind": "run_started"}])
                response = await client.post("/v1/runs/f/events", content=orjson.dumps(body))
                assert response.status_code < 500, response.text
                if response.status_code >= 400:
                    assert set(response.json()) == {"error", "field", "detail"}
                assert (await client.get("/report", params={"run_id": "f"})).status_code == 200
                assert (await client.get("/metrics")).status_code == 200
        finally:
            await service.stop()
