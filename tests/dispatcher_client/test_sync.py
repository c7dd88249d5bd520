"""SyncSidecarClient: the async client's behaviour from a plain thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher_client import ClientConfig, SidecarError, SyncSidecarClient
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.perf import DispatchLatencyTracker, build_ng_perf
from tests.sidecar.service_support import generate_run

from .support import free_port

pytestmark = pytest.mark.timeout(60)


class TestSyncClient:
    def test_events_and_reads_from_a_plain_thread(self, tmp_path: Path) -> None:
        run = generate_run(num_tasks=4, repeats=2, seed=9, fault_rate=0.0, failure_rate=0.2)
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url, SyncSidecarClient(url, run_id="sync") as client:
            client.start_run(plan=run.plan, dispatch_budget_s=3600)
            for event in run.events:
                if event["kind"] == "completed" and "row" in event:
                    perf = client.completed(None, event["row"], seconds=event["seconds"])
                    assert perf == build_ng_perf(event["row"], event["seconds"] * 1000.0)
                elif event["kind"] == "failed":
                    client.failed(None, event["row"], seconds=event["seconds"])
                elif event["kind"] == "drained":
                    client.drained({"_ng_task_index": event["task_index"], "_ng_rollout_index": 0})
            client.run_ended()
            assert client.flush(10)
            assert client.drain_margin() == run.local_tracker().drain_margin(None)
            report = client.report()
            assert client.stats.dropped == 0 and client.stats.rejected == 0
        assert report["accounting"]["expected"] == sum(run.plan.values())

    def test_two_identical_calls_are_two_records_waiting_or_not(self, tmp_path: Path) -> None:
        row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0}
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url, SyncSidecarClient(url, run_id="twice") as client:
            client.start_run(plan={"0": 1})
            client.completed(None, row, seconds=5.0)  # waits for the sidecar's ng_perf
            client.completed(None, row, seconds=5.0, wait=False)  # handed over, not awaited
            client.failed(None, {"_ng_failure_class": "cancelled"}, seconds=1.0)
            client.failed(None, {"_ng_failure_class": "cancelled"}, seconds=1.0)
            assert client.flush(10)
            report = client.report()
            assert client.stats.duplicates == 0
        assert report["events"]["completed"] == 2
        assert report["quality_summary"]["run"]["issues"]["rollout_duplicate_identity"] == 2
        assert report["events"]["failed"] == [{"failure_class": "cancelled", "terminal": False, "count": 2}]


def test_drain_margin_fails_open_to_the_facades_local_tracker() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    config = ClientConfig(backoff_initial_s=0.01, close_timeout_s=0.05)
    with SyncSidecarClient(url, run_id="down", config=config) as client:
        client.start_run(drain_margin_s=None)
        reference = DispatchLatencyTracker()
        for index in range(8):
            client.completed(None, {}, seconds=10.0 * (index + 1), wait=False)
            reference.record(10.0 * (index + 1))
        client.failed(None, {}, seconds=75.0)
        reference.record_failure(75.0)
        client.drained(None)
        reference.record_drained()
        with pytest.raises(SidecarError):
            client.drain_margin(strict=True)
        assert client.drain_margin() == reference.drain_margin(None)
        assert client.local.summary() == reference.summary()
        assert client.stats.local_drain_margin == 1


class TestOneCore:
    """The sync client is a facade over one ``SidecarClient``: one source, one sequence and one
    local tracker, whichever way an event goes (handed over, or awaited on the loop)."""

    def test_one_source_one_sequence_one_tracker(self, tmp_path: Path) -> None:
        row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0}
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url, SyncSidecarClient(url, run_id="one") as client:
            core = client.core
            assert client.source == core.source and client.local is core.local and client.stats is core.stats
            # no second copy of the core's state anywhere on the facade
            assert not {"_seq", "_run_margin", "_reads_down_until"} & set(vars(client))
            client.start_run(plan={"0": 3})
            client.completed(None, row, seconds=2.0)  # awaited on the loop
            client.completed(None, row, seconds=4.0, wait=False)  # handed over
            client.failed(None, {"_ng_failure_class": "cancelled"}, seconds=1.0)
            client.drained(None)
            assert client.flush(10)
            assert client.next_number() == (core.source, 4)  # the four events took seqs 0..3
            assert core.local.count == 2 and core.local.drained == 1  # each sample recorded once
            assert client.local.samples() == [2.0, 4.0]
            assert client.stats.duplicates == 0
            report = client.report()
        assert report["events"]["completed"] == 2


def test_start_run_passes_the_tracker_runs_to_log_into(tmp_path: Path) -> None:
    thread = ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3"))
    with thread as url, SyncSidecarClient(url, run_id="tracked") as client:
        client.start_run(plan={"0": 1}, tracking={"wandb_run_path": "rollouts/abc123"})
        assert client.flush(10)
        assert thread.service is not None
        tracking = thread.service.ingestor.runs["tracked"].config.tracking
    assert tracking is not None and tracking.wandb_run_path == "rollouts/abc123"
    assert tracking.mlflow_run_id is None
