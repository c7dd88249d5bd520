"""What both clients share: errors with the sidecar's answer, ClientClosed, transport=."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dispatcher_client import (
    ClientClosed,
    RemoteLatencyTracker,
    SidecarAuthError,
    SidecarClient,
    SidecarError,
    SidecarUnreachable,
    SyncSidecarClient,
)
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings

pytestmark = pytest.mark.timeout(60)


class CountingTransport(httpx.AsyncHTTPTransport):
    """The real network transport, counting the requests it carries."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await super().handle_async_request(request)


def _settings(tmp_path: Path) -> ServiceSettings:
    return ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")


async def test_sidecar_error_carries_the_answer(tmp_path: Path) -> None:
    with ServiceThread(_settings(tmp_path)) as url:
        async with SidecarClient(url, run_id="never-started") as client:
            with pytest.raises(SidecarError) as raised:
                await client.report()
    assert raised.value.status == 404
    assert raised.value.response is not None and raised.value.response.json()["error"] == "unknown_run"


async def test_unreachable_sidecar_error_has_no_answer() -> None:
    async with SidecarClient("http://127.0.0.1:9", run_id="r") as client:
        with pytest.raises(SidecarError) as raised:
            await client.report(timeout_s=1.0)
    assert raised.value.status is None and raised.value.response is None


async def test_unreachable_is_its_own_error_naming_the_url() -> None:
    async with SidecarClient("http://127.0.0.1:9", run_id="r") as client:
        with pytest.raises(SidecarUnreachable) as raised:
            await client.report(timeout_s=1.0)
    message = str(raised.value)
    assert "cannot reach the sidecar at http://127.0.0.1:9" in message and "\n" not in message
    assert isinstance(raised.value, SidecarError)


async def test_events_refused_for_the_token_surface_as_an_auth_error_not_unknown_run(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", token=Secret("s3cret"))
    with ServiceThread(settings) as url:
        async with SidecarClient(url, run_id="run-8", token="") as client:
            await client.start_run(plan={0: 1})
            assert await client.flush(5.0)
            with pytest.raises(SidecarAuthError) as raised:
                await client.report()
        async with SidecarClient(url, run_id="run-8", token="s3cret") as client:  # the fix works
            await client.start_run(plan={0: 1})
            assert await client.flush(5.0)
            assert (await client.report())["run_id"] == "run-8"
    assert raised.value.status == 404  # what the read answered; the cause is the 401 before it
    message = str(raised.value)
    assert f"the sidecar at {url} has no run 'run-8'" in message
    assert "HTTP 401" in message and "ROLLOUT_SIDECAR_TOKEN" in message


async def test_a_client_not_open_raises_client_closed() -> None:
    client = SidecarClient("http://127.0.0.1:9", run_id="r")
    with pytest.raises(ClientClosed, match="SidecarClient is not open"):
        client.submit_event({"kind": "run_ended"})
    with pytest.raises(ClientClosed):
        await client.drain_margin()
    assert isinstance(ClientClosed("x"), SidecarError) and isinstance(ClientClosed("x"), RuntimeError)


def test_sync_client_and_tracker_take_a_transport(tmp_path: Path) -> None:
    sync_transport, tracker_transport = CountingTransport(), CountingTransport()
    with ServiceThread(_settings(tmp_path)) as url:
        with SyncSidecarClient(url, run_id="t", transport=sync_transport) as client:
            client.start_run(drain_margin_s=5.0)
            assert client.flush(timeout_s=10)
            client.drain_margin(timeout_s=2.0, strict=True)
        with RemoteLatencyTracker(url, run_id="t2", transport=tracker_transport) as tracker:
            tracker.record(1.0)
            assert tracker.flush(10)
    assert "/v1/runs/t/events" in sync_transport.paths and "/drain_margin" in sync_transport.paths
    assert "/v1/runs/t2/events" in tracker_transport.paths


def test_sync_client_closed(tmp_path: Path) -> None:
    with ServiceThread(_settings(tmp_path)) as url:
        client = SyncSidecarClient(url, run_id="d")
        client.start_run()
        assert client.flush(timeout_s=10)
        assert client.drain_margin(timeout_s=2.0) is None
        client.close(timeout_s=10)
    with pytest.raises(ClientClosed, match="SyncSidecarClient is not open"):
        client.flush(1)


def test_both_clients_fall_back_to_the_local_drain_margin_alike() -> None:
    """Unreachable: both answer from their own local tracker with the run's configured margin."""
    answers = []
    with SyncSidecarClient("http://127.0.0.1:9", run_id="f") as sync:
        sync.start_run(drain_margin_s=7.0)
        for seconds in (1.0, 2.0, 3.0):
            sync.local.record(seconds)
        answers.append((sync.drain_margin(timeout_s=0.5), sync.local.drain_margin(7.0)))
        assert sync.stats.local_drain_margin == 1
    assert answers[0][0] == answers[0][1]
