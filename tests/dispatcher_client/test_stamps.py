"""Each event a client sends is stamped with when it happened, by the client's clock: the
sidecar's rates and timeline go by those times, never by when the events arrived."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dispatcher_client import ClientConfig, RemoteLatencyTracker, SyncSidecarClient
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings

pytestmark = pytest.mark.timeout(60)

T0 = 1_800_000_000.0


class Clock:
    """The client's wall clock, moved by the test (the sidecar's runs on its own)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _row(task: int) -> dict[str, int]:
    return {"_ng_task_index": task, "_ng_rollout_index": 0}


def test_every_event_and_the_runs_start_and_end_carry_the_clients_time(tmp_path: Path) -> None:
    clock = Clock()
    config = ClientConfig(clock=clock)
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        with SyncSidecarClient(url, run_id="stamped", config=config) as client:
            client.start_run(plan={0: 1, 1: 1}, dispatch_budget_s=3600.0)
            for at, send in (
                (10.0, lambda: client.started(_row(0))),
                (
                    610.0,
                    lambda: client.completed(_row(0), {**_row(0), "reward": 1.0}, seconds=600.0, wait=False),
                ),
                (
                    700.0,
                    lambda: client.failed(
                        _row(1), {**_row(1), "_ng_failure_class": "cancelled"}, seconds=9.0
                    ),
                ),
                (800.0, lambda: client.drained(_row(1))),
                (900.0, client.run_ended),
            ):
                clock.now = T0 + at
                send()
            assert client.flush(10.0)
        with RemoteLatencyTracker(url, run_id="tracked", config=config) as tracker:  # stamps its start now
            for at in (930.0, 960.0, 990.0):
                clock.now = T0 + at
                tracker.record(20.0)
            assert tracker.flush(10.0)
        report = httpx.get(f"{url}/report", params={"run_id": "stamped"}).json()
        timeline = httpx.get(f"{url}/v1/runs/stamped/timeline").json()
        tracked = httpx.get(f"{url}/v1/runs/tracked/timeline").json()
        tracked_report = httpx.get(f"{url}/report", params={"run_id": "tracked"}).json()
    assert (report["started_at"], report["ended_at"]) == (T0, T0 + 900.0)
    assert (timeline["t"][0], timeline["t"][-1]) == (T0 + 1.0, T0 + 900.0)  # from the start, to the end
    series = timeline["series"]
    assert [sum(series[name]) for name in ("started", "completed", "failed", "drained")] == [1, 1, 1, 1]
    assert series["completed"][610] == 1  # point k covers [k, k + 1) s from the start
    assert series["seconds_left"][-1] == 3600.0 - 900.0
    assert report["latency"]["completions_per_hour"] == 3600.0 / 900.0  # one completion in 900 s
    assert sum(tracked["series"]["completed"]) == 3  # the tracker's record calls, at their times
    assert tracked["started_at"] == T0 + 900.0 and tracked["t"][-1] == T0 + 990.0
    assert tracked_report["latency"]["completions_per_hour"] == 3 * 3600.0 / 90.0
