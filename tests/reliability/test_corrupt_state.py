"""Torn WAL tails, truncated database files, older/newer schemas, foreign and non-SQLite files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.corrupt import run_corrupt_trials, run_schema_cases
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestCorruptState:
    def test_torn_wal_and_truncated_database(self, tmp_path: Path, launch: Launch) -> None:
        result = run_corrupt_trials(2, tmp_path, launch=launch)
        no_violations(result.violations)
        assert result.torn_trials == 2 and result.truncated_trials == 2
        assert result.torn_last_batch_kept + result.torn_last_batch_dropped == 2
        assert result.truncated_refused + result.truncated_started_complete == 2

    def test_schema_versions_and_foreign_files(self, tmp_path: Path, launch: Launch) -> None:
        result = run_schema_cases(tmp_path, launch=launch)
        no_violations(result.violations)
        assert result.schema_cases["older schema (v1)"].startswith("refused")
        refused = [name for name, outcome in result.schema_cases.items() if outcome.startswith("refused")]
        assert len(refused) == 6, result.schema_cases
