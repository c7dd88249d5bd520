"""SIGKILL while a client streams: no acknowledged event lost, none twice, report == batch."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmarks.reliability.crash import run_crash_trials
from benchmarks.reliability.sidecar_process import Launch, SidecarProcess, reap_orphans
from benchmarks.reliability.workload import generate_run

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestCrash:
    def test_twenty_kills_mid_stream(self, tmp_path: Path, launch: Launch) -> None:
        result = run_crash_trials(20, tmp_path, kills_per_run=5, num_tasks=100, max_gap_s=0.3, launch=launch)
        no_violations(result.violations)
        assert result.trials == 20
        assert result.runs >= 1 and result.events_acked > 0

    def test_kills_with_a_worker_pool_lose_nothing(self, tmp_path: Path, launch: Launch) -> None:
        result = run_crash_trials(
            5,
            tmp_path,
            kills_per_run=5,
            num_tasks=100,
            max_gap_s=0.3,
            launch=launch,
            serve_args=("--workers", "1"),
            orphan_grace_s=0.2,
        )
        no_violations(result.violations)  # orphaned pool workers count as violations too
        assert result.trials == 5

    def test_kills_while_snapshots_are_written_lose_nothing(self, tmp_path: Path, launch: Launch) -> None:
        result = run_crash_trials(
            8,
            tmp_path,
            kills_per_run=4,
            num_tasks=100,
            max_gap_s=0.3,
            launch=launch,
            serve_args=("--snapshot-every-events", "7", "--snapshot-keep", "2"),
        )
        no_violations(result.violations)
        assert result.trials == 8
        snapshots = list(tmp_path.glob("run-*/state/journal.sqlite3.snapshots/snapshot-*.bin"))
        assert snapshots, "the service should have written snapshots"

    def test_sigkill_leaves_no_worker_behind(self, tmp_path: Path) -> None:
        proc = SidecarProcess(tmp_path / "j.sqlite3", tmp_path / "log", extra_args=["--workers", "1"])
        url = proc.start()
        try:
            run = generate_run("w", tmp_path / "run", num_tasks=2, failure_rate=0.0)
            for batch in (run.events[:1], run.events[1:]):  # rows of a started run go to the pool
                response = httpx.post(f"{url}/v1/runs/w/events", json=batch, timeout=30)
                assert response.status_code == 200
            children = proc.freeze_and_list_descendants()
            assert children, "the worker pool should be running"
        finally:
            proc.kill()
        assert reap_orphans(children) == []
