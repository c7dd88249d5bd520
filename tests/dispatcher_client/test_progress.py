"""``started`` / ``heartbeat`` from both clients: one call each, delivered, and failing open."""

from __future__ import annotations

from pathlib import Path

import httpx

from dispatcher_client import ClientConfig, SidecarClient, SyncSidecarClient
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings

from .support import free_port

ROW = {"_ng_task_index": 7, "_ng_rollout_index": 2, "_ng_attempt_index": 1, "responses_create_params": {}}


def _inflight(url: str, run_id: str) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{url}/v1/runs/{run_id}/inflight", timeout=10).json()
    return body


async def test_async_client_reports_starts_and_heartbeats(tmp_path: Path) -> None:
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        async with SidecarClient(url, run_id="async-run") as client:
            await client.start_run(plan={7: 3})
            await client.started(ROW)
            await client.heartbeat(ROW)
            await client.started({"no": "identity"})  # cannot be tracked: not sent, counted
            assert await client.flush(10.0)
            assert client.stats.rejected == 1
            body = _inflight(url, "async-run")
            assert body["count"] == 1
            [entry] = body["oldest"]  # type: ignore[misc]
            assert (entry["task_index"], entry["rollout_index"], entry["attempt"]) == (7, 2, 1)
            assert entry["last_heartbeat"] is not None
            await client.failed(ROW, {**ROW, "_ng_failure_class": "timeout_exceeded"}, seconds=3.0)
            assert await client.flush(10.0)
            assert _inflight(url, "async-run")["count"] == 0


def test_sync_client_reports_starts_and_heartbeats(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url, SyncSidecarClient(url, run_id="sync-run") as client:
        client.start_run(plan={7: 3})
        client.started(ROW)
        client.heartbeat(ROW)
        client.started(None)
        assert client.flush(10.0)
        assert client.stats.rejected == 1
        assert _inflight(url, "sync-run")["count"] == 1


async def test_a_dead_sidecar_does_not_hold_up_started(tmp_path: Path) -> None:
    config = ClientConfig(backoff_initial_s=0.01, close_timeout_s=0.1)
    client = await SidecarClient(f"http://127.0.0.1:{free_port()}", run_id="void", config=config).open()
    for index in range(200):
        await client.started({"_ng_task_index": index})
        await client.heartbeat({"_ng_task_index": index})
    await client.aclose()
    stats = client.stats
    assert (stats.submitted, stats.sent, stats.dropped) == (400, 0, 400)  # never raised, all counted
