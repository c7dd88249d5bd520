"""SIGKILL while a client streams: no acknowledged event lost, none twice, report == batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.journal import Journal
from tests.reliability_harness.crash import run_crash_trials
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestCrash:
    def test_twenty_kills_mid_stream(self, tmp_path: Path, launch: Launch) -> None:
        result = run_crash_trials(20, tmp_path, kills_per_run=5, num_tasks=100, max_gap_s=0.3, launch=launch)
        no_violations(result.violations)
        assert result.trials == 20
        assert result.runs >= 1 and result.events_acked > 0

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
        snapshots = [
            seq
            for path in tmp_path.glob("run-*/state/journal.sqlite3")
            for seq, _ in Journal(path).snapshots()
        ]
        assert snapshots, "the service should have written snapshots"
