"""RemoteLatencyTracker: the local answers of DispatchLatencyTracker, forwarded once to the sidecar."""

from __future__ import annotations

import random
import time
from pathlib import Path

import httpx
import pytest

from dispatcher_client import ClientConfig, RemoteLatencyTracker, SyncSidecarClient
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.perf import DispatchLatencyTracker

from .support import free_port

pytestmark = pytest.mark.timeout(60)


def _ops(seed: int, count: int) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    ops = []
    for _ in range(count):
        roll = rng.random()
        op = "record" if roll < 0.7 else "record_failure" if roll < 0.9 else "record_drained"
        ops.append((op, rng.lognormvariate(4, 1)))
    return ops


def _apply(tracker: DispatchLatencyTracker | RemoteLatencyTracker, ops: list[tuple[str, float]]) -> None:
    for op, seconds in ops:
        if op == "record_drained":
            tracker.record_drained()
        else:
            getattr(tracker, op)(seconds)


def _same_answers(a: DispatchLatencyTracker | RemoteLatencyTracker, b: DispatchLatencyTracker) -> None:
    assert a.drained == b.drained
    assert a.summary() == b.summary()
    for q in (0.0, 0.5, 0.75, 0.95, 1.0):
        assert a.quantile(q) == b.quantile(q)
    for configured in (None, 0.0, 30.0):
        assert a.drain_margin(configured) == b.drain_margin(configured)


class TestRemoteLatencyTracker:
    def test_local_answers_equal_the_in_process_tracker_and_the_sidecar(self, tmp_path: Path) -> None:
        ops = _ops(1, 400)
        reference = DispatchLatencyTracker()
        _apply(reference, ops)
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url:
            with RemoteLatencyTracker(url, run_id="remote") as tracker:
                _apply(tracker, ops)
                _same_answers(tracker, reference)
                assert tracker.count == reference.count  # the rest of the API, via the local tracker
                assert tracker._durations == reference.samples()  # the seed's documented attributes
                assert tracker._drained == reference.drained
                assert tracker.flush(10)
                stats = tracker.stats
                assert (stats.sent, stats.dropped, stats.rejected) == (len(ops) + 1, 0, 0)
            body = httpx.get(f"{url}/drain_margin", params={"run_id": "remote"}).json()
            report = httpx.get(f"{url}/report", params={"run_id": "remote"}).json()
        assert body["drain_margin"] == reference.drain_margin(None)
        assert (body["samples"], body["drained"]) == (reference.count, reference.drained)
        assert report["latency"]["summary"] == reference.summary()
        assert report["accounting"]["succeeded"] == 0  # latency-only: no rollouts, no health rows
        assert report["quality_summary"]["run"]["verdicts"] == {"healthy": 0, "unhealthy": 0, "unobserved": 0}

    def test_sidecar_down_changes_nothing_for_the_caller(self) -> None:
        config = ClientConfig(backoff_initial_s=0.01, close_timeout_s=0.1)
        url = f"http://127.0.0.1:{free_port()}"
        ops = _ops(2, 300)
        reference = DispatchLatencyTracker()
        _apply(reference, ops)
        tracker = RemoteLatencyTracker(url, run_id="down", config=config)
        started = time.perf_counter()
        _apply(tracker, ops)
        elapsed = time.perf_counter() - started
        _same_answers(tracker, reference)
        assert elapsed < 1.0  # microseconds per call, with generous slack for a busy machine
        tracker.close()
        assert tracker.stats.sent == 0 and tracker.stats.dropped == len(ops) + 1

    def test_two_trackers_of_one_run_are_not_collapsed(self, tmp_path: Path) -> None:
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url, SyncSidecarClient(url, run_id="shards") as shared:
            first = RemoteLatencyTracker(client=shared)
            second = RemoteLatencyTracker(client=shared, start_run=False)
            for seconds in (10.0, 20.0, 30.0):
                first.record(seconds)
                second.record(seconds)
            assert shared.flush(10)
            assert shared.stats.duplicates == 0
            body = httpx.get(f"{url}/drain_margin", params={"run_id": "shards"}).json()
        assert body["samples"] == 6


def test_a_closed_tracker_still_answers_locally() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    tracker = RemoteLatencyTracker(url, run_id="closed", config=ClientConfig(close_timeout_s=0.05))
    tracker.close()
    ops = _ops(3, 50)
    _apply(tracker, ops)  # after close: no error, no thread, local answers
    reference = DispatchLatencyTracker()
    _apply(reference, ops)
    _same_answers(tracker, reference)
    assert tracker.stats.dropped >= len(ops)
