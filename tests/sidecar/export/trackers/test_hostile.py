"""MLflow and W&B against a hostile endpoint (hang, drip, huge body, 500s): every call ends, reads
at most a few MiB, is tried once, and the service keeps ingesting with one warning per outage."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from sidecar.export.failopen import MAX_RESPONSE_BYTES
from sidecar.export.trackers import RunTarget, TrackerSettings
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.sidecar.export.trackers.hostile import HostileEndpoint
from tests.sidecar.export.trackers.support import RUN, run_events, wait_for
from tests.sidecar.service_support import post_events

MODES = ["hang", "drip", "huge", "500"]


def _traced(call: Callable[[], Any]) -> tuple[BaseException, int]:
    """The exception ``call`` raised and the peak bytes allocated meanwhile."""
    tracemalloc.start()
    try:
        with pytest.raises(Exception) as raised:
            call()
        return raised.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("mode", MODES)
def test_an_mlflow_call_fails_once_within_its_deadline_and_reads_a_few_mib(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install '.[mlflow]'")
    from sidecar.export.trackers.backends import MlflowBackend

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    endpoint = HostileEndpoint(mode)
    with endpoint as url:
        backend = MlflowBackend(url, "hostile", None, timeout_s=0.5)
        error, peak = _traced(lambda: backend.open(RunTarget("r"), None, "instance"))
    assert endpoint.requests == 1  # no retry: the next interval is the retry
    assert peak < 8 * MAX_RESPONSE_BYTES, f"{peak} bytes allocated"
    if mode == "huge":  # 2 GiB offered; the client hung up after its cap (plus socket buffers)
        assert endpoint.written < 16 * MAX_RESPONSE_BYTES
        assert f"over {MAX_RESPONSE_BYTES} bytes" in str(error)
    if mode in ("hang", "drip"):
        assert "no complete answer within 0.5 s" in str(error)


@pytest.mark.parametrize("mode", MODES)
def test_a_wandb_run_cannot_open_past_its_timeout(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wandb_offline: Path
) -> None:
    """Online against the endpoint: wandb's own service process talks to it (its answers never
    reach this one); ``wandb.init`` gives up at the tracker timeout, not after wandb's 90 s of
    retries."""
    import wandb

    from sidecar.export.trackers.backends import WandbBackend

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.delenv("WANDB_ERROR_REPORTING", raising=False)  # restored after the backend sets it
    endpoint = HostileEndpoint(mode)
    with endpoint as url:
        monkeypatch.setenv("WANDB_BASE_URL", url)
        backend = WandbBackend("hostile", None, None, timeout_s=2.0)
        error, peak = _traced(lambda: backend.open(RunTarget("r"), None, "instance"))
        backend.close()
        wandb.teardown()  # flushes what wandb would send from this process at exit
    assert peak < 8 * MAX_RESPONSE_BYTES, f"{peak} bytes allocated"
    # at most 3 retries, and nothing sent from this process (wandb's own analytics read whole answers)
    assert 1 <= endpoint.requests <= 4, endpoint.lines
    assert not [line for line in endpoint.lines if "/sdk/otel" in line], endpoint.lines
    assert "resume status" in str(error)  # the open failed, not something before it


def _dropped(http: httpx.Client, reason: str) -> float:
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "rollout_sidecar_tracker_exports_dropped_total" and sample.labels == {
                "tracker": "mlflow",
                "reason": reason,
            }:
                return sample.value
    return 0.0


@pytest.mark.parametrize("mode", ["huge", "drip"])
def test_the_service_keeps_ingesting_and_warns_once(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install '.[mlflow]'")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    run, started = run_events(seed=4)
    third = len(run.events) // 3
    endpoint = HostileEndpoint(mode)
    with endpoint as url:
        trackers = TrackerSettings(mlflow_tracking_uri=url, interval_s=0.1, retry_down_s=0.1, timeout_s=0.5)
        settings = ServiceSettings(
            port=0, journal_path=tmp_path / "j.sqlite3", health_metrics_interval_s=0.0, trackers=trackers
        )
        with (
            capture_logs() as logs,
            ServiceThread(settings) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            post_events(http, RUN, [started, *run.events[:third]])
            wait_for(lambda: _dropped(http, "failed") >= 3, "three failed attempts")
            post_events(http, RUN, run.events[third:])  # ingest answers throughout
            assert http.get("/drain_margin", params={"run_id": RUN}).status_code == 200
            completed = http.get("/report", params={"run_id": RUN}).json()["events"]["completed"]
    assert completed > 0
    assert endpoint.requests >= 3
    if mode == "huge":  # every attempt offered 2 GiB; each read stopped at the cap
        assert endpoint.written < endpoint.requests * 16 * MAX_RESPONSE_BYTES
    down = [entry for entry in logs if entry["event"].startswith("push destination down")]
    assert len(down) == 1, down  # one warning for the whole outage
    assert down[0]["worker"] == "tracker-mlflow"
