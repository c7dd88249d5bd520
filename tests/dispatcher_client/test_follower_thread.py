"""``serve --follow``'s follower thread: transient errors restart it, its state is in /readyz and /metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import dispatcher_client.follow as follow_module
from sidecar.http.follow import FollowerThread
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.sidecar.service_support import generate_run


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_permission_error_restarts_the_follower_and_shows_in_readyz(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "followed"
    run = generate_run(num_tasks=4, repeats=2, failure_rate=0.0, drained_fraction=0.0)
    lines = run.write_rollouts(run_dir)
    expected = len(lines.read_bytes().splitlines())
    real = follow_module.read_new_lines
    failures = [PermissionError(13, "Permission denied", str(lines))] * 2

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(follow_module, "read_new_lines", flaky)
    service = ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3"))
    with service as url, httpx.Client(base_url=url, timeout=30) as client:
        follower = FollowerThread(run_dir, url, poll_interval_s=0.05)
        assert service.service is not None
        service.service.follower = follower
        follower.start()
        try:
            _wait(lambda: follower.retries >= 2 and follower.state == "following")

            def completed() -> int:
                runs = client.get("/v1/runs").json()["runs"]
                return runs[0]["completed"] if runs else 0

            _wait(lambda: completed() == expected)
            ready = client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["follower"]["state"] == "following"
            assert ready.json()["follower"]["retries"] == 2
            assert "PermissionError" in ready.json()["follower"]["last_error"]
            states = {
                sample.labels["state"]: sample.value
                for family in text_string_to_metric_families(client.get("/metrics").text)
                for sample in family.samples
                if sample.name == "rollout_sidecar_follower_state"
            }
            assert states == {"starting": 0.0, "following": 1.0, "retrying": 0.0, "stopped": 0.0}
        finally:
            follower.stop()
