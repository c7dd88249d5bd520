"""The bearer token: ``token=`` wins, else ``$ROLLOUT_SIDECAR_TOKEN``, for every client kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher_client import ClientConfig, RemoteLatencyTracker, SidecarClient, SyncSidecarClient
from dispatcher_client.config import TOKEN_ENV_VAR, resolve_token
from sidecar.http import settings as service_settings
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings

ROW = {"_ng_task_index": 0, "_ng_rollout_index": 0}


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", token=Secret("s3cret"))
    with ServiceThread(settings) as url:
        yield url


def test_the_client_and_the_service_read_the_same_variable() -> None:
    assert TOKEN_ENV_VAR == service_settings.TOKEN_ENV_VAR == "ROLLOUT_SIDECAR_TOKEN"


@pytest.mark.parametrize(
    ("token", "env", "sent"),
    [
        (None, {}, None),
        (None, {TOKEN_ENV_VAR: " s3cret \n"}, "s3cret"),
        (None, {TOKEN_ENV_VAR: "  "}, None),
        ("explicit", {TOKEN_ENV_VAR: "s3cret"}, "explicit"),
        ("", {TOKEN_ENV_VAR: "s3cret"}, None),
    ],
)
def test_resolution(token: str | None, env: dict[str, str], sent: str | None) -> None:
    assert resolve_token(token, env) == sent


async def test_async_client_uses_the_variable_and_an_explicit_token_wins(
    sidecar: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV_VAR, "s3cret")
    async with SidecarClient(sidecar, run_id="env") as client:
        await client.start_run()
        await client.drained(ROW)
        assert await client.flush(10)
        assert (client.stats.sent, client.stats.rejected) == (2, 0)
    config = ClientConfig(linger_s=0.05)
    async with SidecarClient(sidecar, run_id="env", token="wrong", config=config) as wrong:
        await wrong.drained({**ROW, "_ng_rollout_index": 1})
        assert await wrong.flush(10)
        assert (wrong.stats.sent, wrong.stats.rejected) == (0, 1)


async def test_without_the_variable_no_token_is_sent(sidecar: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV_VAR, raising=False)
    async with SidecarClient(sidecar, run_id="none", config=ClientConfig(linger_s=0.05)) as client:
        await client.drained(ROW)
        assert await client.flush(10)
        assert (client.stats.sent, client.stats.rejected) == (0, 1)


def test_sync_client_and_remote_tracker_use_the_variable(
    sidecar: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV_VAR, "s3cret")
    with SyncSidecarClient(sidecar, run_id="sync") as client:
        client.start_run()
        client.drained(ROW)
        assert client.flush(10)
        assert (client.stats.sent, client.stats.rejected) == (2, 0)
    with RemoteLatencyTracker(sidecar, run_id="tracker") as tracker:
        tracker.record(12.0)
        assert tracker.flush(10)
        assert (tracker.stats.sent, tracker.stats.rejected) == (2, 0)
